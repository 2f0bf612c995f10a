//! Fuzzy matching behind a small trait, so the tables do not depend on one matcher and tests can
//! reason about what matches.
//!
//! This module only scores text; it never sorts, filters or keeps rows.

use fuzzy_matcher::FuzzyMatcher;
use fuzzy_matcher::skim::SkimMatcherV2;

/// Whether `text` matches `query`, and where (char positions in `text`, for highlighting).
pub trait Matcher {
    fn positions(&self, text: &str, query: &str) -> Option<Vec<usize>>;
}

/// skim's fuzzy matcher, smart case (an upper-case letter in the query makes it case-sensitive).
pub struct Skim(SkimMatcherV2);

impl Default for Skim {
    fn default() -> Self {
        Skim(SkimMatcherV2::default().smart_case())
    }
}

impl Matcher for Skim {
    fn positions(&self, text: &str, query: &str) -> Option<Vec<usize>> {
        self.0.fuzzy_indices(text, query).map(|(_, at)| at)
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
}
