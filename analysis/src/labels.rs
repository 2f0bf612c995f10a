//! What names an allocation site (docs/reference.md §3 "Labels"): its first frame outside the
//! allocator and the functions that only wrap it (`xmalloc`, `operator new`, `g_malloc`,
//! `Perl_safesysmalloc`, `PyMem_Malloc`, …), so that a site says who asked for the memory.
//!
//! Owns the built-in list of wrappers and the process-wide user pattern that extends it
//! (`HEAPTUI_ALLOC_WRAPPERS` in the agent, `--wrappers` in heaptui), set once at start-up
//! before any graph is built. Frames are the symbolized strings of a site (`function (file:line)`
//! or `module+0xOFFSET`); this module reads nothing else and never allocates per lookup.

use std::sync::OnceLock;

use regex::Regex;

/// Functions that allocate on behalf of their caller, matched on the function name alone (a
/// C++ name without its parameter list). A trailing `*` matches any rest.
const BUILT_IN: &[&str] = &[
    // The malloc family and glibc's internals behind it.
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "__libc_*",
    "_int_*",
    "_mid_memalign",
    "tcache_*",
    // C++: every overload of operator new and new[], demangled or not.
    "operator new",
    "operator new[]",
    "_Znwm*",
    "_Znam*",
    "_ZnwmSt11align_val_t*",
    // The standard library's allocators, which only call operator new.
    "std::allocator_traits*",
    "std::__new_allocator*",
    "__gnu_cxx::new_allocator*",
    // Copies.
    "strdup",
    "strndup",
    "__strdup",
    "__strndup",
    "wcsdup",
    // The usual die-on-failure wrappers (GNU, git, …).
    "xmalloc",
    "xcalloc",
    "xrealloc",
    "xstrdup",
    "xstrndup",
    "xzalloc",
    "xmemdup*",
    // GLib.
    "g_malloc*",
    "g_realloc*",
    "g_try_malloc*",
    "g_try_realloc*",
    "g_slice_alloc*",
    "g_memdup*",
    "g_strdup",
    "g_strndup",
    // Perl.
    "Perl_safesys*",
    // CPython.
    "PyMem_*",
    "_PyMem_*",
    "PyObject_Malloc",
    "PyObject_Calloc",
    "PyObject_Realloc",
    "_PyObject_Malloc",
    "_PyObject_Calloc",
    "_PyObject_Realloc",
    "pymalloc_*",
    // glibc's thread creation: a new thread's TLS vector and stack bookkeeping are asked for
    // by whoever called pthread_create.
    "allocate_dtv",
    "_dl_allocate_tls",
    "_dl_allocate_tls_init",
    "allocate_stack",
    "pthread_create*",
    "__pthread_create*",
    // Rust's global-allocator shims.
    "__rust_alloc*",
    "__rust_realloc",
    "__rdl_alloc*",
    "__rdl_realloc",
    "alloc::alloc::*",
];

/// Which functions are allocator wrappers: the built-in list, plus a user pattern.
#[derive(Clone, Debug, Default)]
pub struct Wrappers {
    /// Matched against the whole function name.
    user: Option<Regex>,
}

impl Wrappers {
    /// The built-in list alone.
    pub fn built_in() -> Wrappers {
        Wrappers::default()
    }

    /// The built-in list plus the functions whose whole name matches `pattern` (a regex).
    /// The error is one line naming the pattern.
    pub fn with_pattern(pattern: &str) -> Result<Wrappers, String> {
        let user = Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| format!("{pattern:?} is not a valid regex: {}", one_line(&e)))?;
        Ok(Wrappers { user: Some(user) })
    }

    /// The process-wide wrappers: those given to [`configure`], else the built-in list.
    pub fn process() -> &'static Wrappers {
        static BUILT_IN_ONLY: Wrappers = Wrappers { user: None };
        PROCESS.get().unwrap_or(&BUILT_IN_ONLY)
    }

    /// Whether the frame `frame` (as a site writes it) is the allocator or one of its wrappers.
    pub fn is_wrapper(&self, frame: &str) -> bool {
        let function = function_of(frame);
        let base = base_name(function);
        BUILT_IN.iter().any(|w| match w.strip_suffix('*') {
            Some(prefix) => base.starts_with(prefix) || function.starts_with(prefix),
            None => base == *w,
        }) || self.user.as_ref().is_some_and(|re| {
            re.is_match(function) || (base.len() < function.len() && re.is_match(base))
        })
    }

    /// The index of the frame that names a site whose frames are `frames` (innermost
    /// first): the first one that is not a wrapper, else the innermost; `None` when there
    /// is no frame.
    pub fn label_index<S: AsRef<str>>(&self, frames: &[S]) -> Option<usize> {
        if frames.is_empty() {
            return None;
        }
        Some(
            frames
                .iter()
                .position(|f| !self.is_wrapper(f.as_ref()))
                .unwrap_or(0),
        )
    }

    /// The frame that names a site (see [`label_index`](Self::label_index)), `?` when none.
    pub fn label<'a, S: AsRef<str>>(&self, frames: &'a [S]) -> &'a str {
        self.label_index(frames).map_or("?", |i| frames[i].as_ref())
    }
}

static PROCESS: OnceLock<Wrappers> = OnceLock::new();

/// Sets the process-wide wrappers, once, before any graph is built; a second call is
/// refused (graphs already built would keep the labels of the first).
pub fn configure(wrappers: Wrappers) -> Result<(), Wrappers> {
    PROCESS.set(wrappers)
}

/// The function of a symbolized frame: `name (file:line)` → `name`. A location is the last
/// ` (…)` when it holds no parenthesis (a C++ parameter list such as `f(void (*)(int))`
/// keeps its own).
pub fn function_of(frame: &str) -> &str {
    if let Some(body) = frame.strip_suffix(')')
        && let Some(at) = body.rfind(" (")
        && !body[at + 2..].contains(['(', ')'])
    {
        return &frame[..at];
    }
    frame
}

/// A C++ function name without its parameter list and qualifiers:
/// `operator new(unsigned long)` → `operator new`, `ns::f(int) const` → `ns::f`. Names
/// without a parameter list are returned whole.
fn base_name(function: &str) -> &str {
    // `operator()` names its own parentheses; anything else opens its parameters at the
    // first `(` outside template brackets.
    let mut depth = 0usize;
    let bytes = function.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' => depth += 1,
            b'>' => depth = depth.saturating_sub(1),
            b'(' if depth == 0 && i > 0 => {
                if function[..i].ends_with("operator") {
                    continue;
                }
                return &function[..i];
            }
            _ => {}
        }
    }
    function
}

fn one_line(e: &regex::Error) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_is_named_by_its_first_frame_outside_the_wrappers() {
        let w = Wrappers::built_in();
        let frames = [
            "operator new(unsigned long) (new_op.cc:50)",
            "xmalloc (workload.c:98)",
            "append_rows (workload.c:229)",
            "main (workload.c:300)",
        ];
        assert_eq!(w.label(&frames), "append_rows (workload.c:229)");
        assert_eq!(
            w.label(&["Perl_safesysmalloc", "Perl_newSV", "main"]),
            "Perl_newSV"
        );
        assert_eq!(
            w.label(&["g_malloc0 (libglib-2.0.so.0)", "g_hash_table_new"]),
            "g_hash_table_new"
        );
        assert_eq!(w.label(&["_Znwm", "f"]), "f");
        // A thread's TLS vector is the thread creator's.
        assert_eq!(
            w.label(&[
                "allocate_dtv (dl-tls.c:390)",
                "_dl_allocate_tls (dl-tls.c:632)",
                "allocate_stack (allocatestack.c:423)",
                "pthread_create@@GLIBC_2.34 (pthread_create.c:652)",
                "spawn_workers (workload.c:310)",
                "main (workload.c:330)",
            ]),
            "spawn_workers (workload.c:310)"
        );
        assert_eq!(
            w.label(&["operator new[](unsigned long, std::nothrow_t const&)", "f"]),
            "f"
        );
        // Only wrappers: the innermost names it; nothing: `?`.
        assert_eq!(w.label(&["malloc", "xmalloc"]), "malloc");
        assert_eq!(w.label::<&str>(&[]), "?");
    }

    #[test]
    fn names_that_merely_contain_a_wrappers_name_are_not_wrappers() {
        let w = Wrappers::built_in();
        for own in [
            "my_malloc",
            "mallocate (a.c:3)",
            "Pool::operator new_thing()",
            "freeze",
            "libc.so.6+0x891f4",
            "f(void (*)(int))",
        ] {
            assert!(!w.is_wrapper(own), "{own}");
        }
    }

    #[test]
    fn a_user_pattern_adds_whole_function_names() {
        let w = Wrappers::with_pattern("my_alloc|pool_.*").unwrap();
        assert!(w.is_wrapper("my_alloc (a.c:3)"));
        assert!(w.is_wrapper("pool_get"));
        assert!(w.is_wrapper("xmalloc"), "the built-in list stays");
        assert!(!w.is_wrapper("my_alloc_twice"), "the whole name must match");
        assert!(!w.is_wrapper("Arena::grab(unsigned long)"));
        let cpp = Wrappers::with_pattern(r"Arena::grab").unwrap();
        assert!(cpp.is_wrapper("Arena::grab(unsigned long) (arena.cpp:9)"));
        let e = Wrappers::with_pattern("(unclosed").unwrap_err();
        assert!(e.starts_with("\"(unclosed\" is not a valid regex"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn locations_and_parameter_lists_come_off_the_function() {
        assert_eq!(function_of("main (workload.c:98)"), "main");
        assert_eq!(function_of("main"), "main");
        assert_eq!(function_of("f(void (*)(int))"), "f(void (*)(int))");
        assert_eq!(function_of("f(int) (a.cpp:3)"), "f(int)");
        assert_eq!(base_name("operator new(unsigned long)"), "operator new");
        assert_eq!(base_name("operator new[](unsigned long)"), "operator new[]");
        assert_eq!(
            base_name("std::vector<int, std::allocator<int> >::push_back(int const&)"),
            "std::vector<int, std::allocator<int> >::push_back"
        );
        assert_eq!(base_name("Functor::operator()(int)"), "Functor::operator()");
        assert_eq!(
            base_name("(anonymous namespace)::f()"),
            "(anonymous namespace)::f"
        );
    }
}
