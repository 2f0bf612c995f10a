//! Fuzzy matching behind a small trait, so the tables do not depend on one matcher and tests can
//! reason about what matches.
//!
//! This module only scores text; it never sorts, filters or keeps rows.

use fuzzy_matcher::FuzzyMatcher;
use fuzzy_matcher::skim::SkimMatcherV2;

/// Whether `text` matches `query`, and where (char positions in `text`, for highlighting).
pub trait Matcher: std::fmt::Debug + Send {
    fn positions(&self, text: &str, query: &str) -> Option<Vec<usize>>;

    /// Whether `text` matches at all; cheaper than [`Matcher::positions`] where it can be, since
    /// filtering asks it of every row and positions are needed only for the rows in view.
    fn is_match(&self, text: &str, query: &str) -> bool {
        self.positions(text, query).is_some()
    }
}

/// skim's fuzzy matcher, smart case (an upper-case letter in the query makes it case-sensitive).
pub struct Skim(SkimMatcherV2);

impl std::fmt::Debug for Skim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Skim")
    }
}

impl Default for Skim {
    fn default() -> Self {
        Skim(SkimMatcherV2::default().smart_case())
    }
}

impl Matcher for Skim {
    fn positions(&self, text: &str, query: &str) -> Option<Vec<usize>> {
        self.0.fuzzy_indices(text, query).map(|(_, at)| at)
    }

    /// skim accepts exactly the texts that hold the query's chars in order (smart case): that
    /// linear scan decides — the same one the agent runs for a server-side object filter —
    /// and skim's scoring is left for the positions.
    fn is_match(&self, text: &str, query: &str) -> bool {
        heaptui_protocol::views::subsequence_match(text, query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_in_order_match_and_say_where() {
        let m = Skim::default();
        assert_eq!(m.positions("worker-1", "wk1"), Some(vec![0, 3, 7]));
        assert_eq!(m.positions("worker-1", "1kw"), None);
        assert!(m.positions("Class1.methodB", "methodb").is_some());
        assert!(m.positions("Class1.methodB", "MethodB").is_none());
    }

    #[test]
    fn the_fast_check_accepts_exactly_what_skim_accepts() {
        let m = Skim::default();
        let texts = [
            "worker-1",
            "thread-n",
            "Class1.methodB",
            "Cache::insert (cache.rs:42)",
            "ÉCOLE-é",
            "",
            "aaa",
            "report-builder",
            "x",
        ];
        let queries = [
            "", "w", "wk1", "1kw", "thn", "methodb", "MethodB", "mB", "c:i", "é", "É", "aaaa",
            "rb", "rEp", "x", "xx",
        ];
        for t in texts {
            for q in queries {
                assert_eq!(
                    m.is_match(t, q),
                    m.positions(t, q).is_some(),
                    "text {t:?} query {q:?}"
                );
            }
        }
    }
}
