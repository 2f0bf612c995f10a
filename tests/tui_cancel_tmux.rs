//! The operator's cancel in a real terminal (docs/reference.md §7, issue 6): `heaptui demo` runs in
//! a detached tmux session of 120×36 under its shipped policy (`report-*` may be cancelled
//! cooperatively); keys go in with `send-keys`, the screen comes back with `capture-pane`.
//!
//! On the runaway `report-builder`: `c` opens the confirmation with the policy file, the
//! agent's predicted release, its verdict and the mechanism; `y` cancels; the outcome shows,
//! and later the release the agent measured beside the prediction. On a worker, which the
//! policy does not permit, the dialog shows the refusal with its reason and confirming sends
//! nothing that acts.
//!
//! tmux and gcc are required (CI installs them); without them the test fails and says so.
//! Every wait polls the pane against a deadline — no fixed sleeps.

mod tmux_common;

use std::time::Duration;

use tmux_common::{PROMPT, Tmux};

/// The dialog's text: the lines between its top and bottom borders, without the box
/// drawing and the screen around it.
fn dialog(screen: &str) -> String {
    let mut inside = false;
    let mut out = String::new();
    for line in screen.lines() {
        if line.contains("┌ Cancel a thread") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.contains('└') {
            break;
        }
        // The table's border, the dialog's, the dialog's text, the dialog's, the table's.
        let bars: Vec<usize> = line.match_indices('│').map(|(i, _)| i).collect();
        if bars.len() < 4 {
            continue;
        }
        let body = &line[bars[1] + '│'.len_utf8()..bars[bars.len() - 2]];
        out.push_str(body.trim_end());
        out.push('\n');
    }
    out
}

/// Text with every run of blanks and line ends made one space (the dialog wraps).
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The byte counts in `(N bytes)` of one line, in order.
fn byte_counts(line: &str) -> Vec<u64> {
    line.split('(')
        .skip(1)
        .filter_map(|p| p.split(" bytes)").next()?.parse().ok())
        .collect()
}

#[test]
fn cancel_the_runaway_report_thread_and_be_refused_on_a_worker() {
    let t = Tmux::start();
    let cache = std::env::temp_dir().join(format!("heaptui-cancel-tmux-{}", std::process::id()));
    t.literal(&format!(
        "XDG_CACHE_HOME={} {} demo",
        cache.display(),
        env!("CARGO_BIN_EXE_heaptui")
    ));
    t.keys(&["Enter"]);
    t.wait_within("the demo's ranking", Duration::from_secs(30), |s| {
        s.contains("· live") && s.contains("report-builder") && s.contains("worker-1")
    });

    // The runaway thread: filtered to, then `c`.
    t.literal("/report-builder");
    t.keys(&["Enter"]);
    t.wait_within("the filtered ranking", Duration::from_secs(10), |s| {
        s.contains("report-builder") && !s.contains("worker-1")
    });
    // The measured release is whole-heap (the agent's snapshot at the decision minus the one
    // after the thread ended), so the other threads' churn — some hundred KiB — counts too.
    // The runaway grows 5 MiB/s: the dialog is reopened (each `c` is a fresh dry run) until
    // it holds at least 16 MiB, where that churn is well under the 5% of issue 6.
    let mut d = String::new();
    for _ in 0..30 {
        t.keys(&["c"]);
        let s = t.wait_within("the dry run's verdict", Duration::from_secs(20), |s| {
            dialog(s).contains("Verdict")
        });
        d = flat(&dialog(&s));
        let predicted = d
            .find("Predicted")
            .and_then(|at| byte_counts(&d[at..]).first().copied());
        if predicted.is_some_and(|p| p >= 16 << 20) {
            break;
        }
        t.keys(&["Escape"]);
        t.wait_within("the dialog closed", Duration::from_secs(10), |s| {
            !s.contains("Cancel a thread")
        });
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(d.contains("report-builder"), "{d}");
    assert!(
        d.contains("demo-policy.toml: 1 permit rule, min_release 1.0 MiB"),
        "the policy in force:\n{d}"
    );
    assert!(
        d.contains("permitted by rule") && d.contains("report-*") && d.contains("cooperative"),
        "the verdict and mechanism:\n{d}"
    );
    let predicted_at = d.find("Predicted").expect("the prediction");
    let predicted_line = &d[predicted_at..];
    let predicted = byte_counts(predicted_line)[0];
    assert!(predicted >= 16 << 20, "{d}");
    assert!(d.contains("y/Enter cancel the thread"), "{d}");

    t.keys(&["y"]);
    let s = t.wait_within("the outcome", Duration::from_secs(20), |s| {
        flat(&dialog(s)).contains("Outcome done")
    });
    assert!(
        !dialog(&s).contains("y/Enter"),
        "confirming again is not offered"
    );
    // The agent measures once the thread has ended (or after its 5 s follow-up deadline).
    let s = t.wait_within("the measured release", Duration::from_secs(30), |s| {
        flat(&dialog(s)).contains("Released measured")
    });
    let d = flat(&dialog(&s));
    let released = &d[d.find("Released").expect("the released line")..];
    let counts = byte_counts(released);
    assert_eq!(counts.len(), 2, "measured and predicted: {released}");
    let (measured, again) = (counts[0], counts[1]);
    // The real cancel decided on a fresh snapshot of its own, a moment after the dry run.
    assert!(again >= predicted, "{released} vs dry run {predicted}");
    // The whole heap is measured (the agent's snapshot at the decision minus the one after
    // the thread ended), so the other threads' churn counts too: within 5%, as issue 6 asks.
    let off = (measured as f64 - again as f64).abs() / again as f64;
    assert!(off < 0.05, "measured vs predicted: {released}");
    t.keys(&["Escape"]);
    t.wait_within("the dialog closed", Duration::from_secs(10), |s| {
        !s.contains("Cancel a thread")
    });

    // A worker: the policy permits `report-*` only.
    t.keys(&["/", "Escape"]);
    t.literal("/worker-1");
    t.keys(&["Enter"]);
    t.wait_within("worker-1 alone", Duration::from_secs(10), |s| {
        s.contains("worker-1") && !s.contains("worker-2")
    });
    t.keys(&["c"]);
    let s = t.wait_within("the refusal", Duration::from_secs(20), |s| {
        dialog(s).contains("Verdict")
    });
    let d = flat(&dialog(&s));
    assert!(d.contains("worker-1"), "{d}");
    assert!(
        d.contains("refused: not permitted: no [[permit]] rule matches thread"),
        "{d}"
    );
    // A refusal offers no `y`: only closing.
    assert!(!d.contains("y/Enter") && d.contains("n/Esc"), "{d}");
    t.keys(&["Escape"]);
    // An Escape followed at once by `/` reads as Alt-/ to the terminal: wait for the dialog to go.
    t.wait_within("the dialog closed", Duration::from_secs(10), |s| {
        !s.contains("Cancel a thread")
    });
    t.keys(&["/", "Escape"]);
    t.wait_within("every thread again", Duration::from_secs(10), |s| {
        s.contains("worker-1") && s.contains("worker-2")
    });

    t.keys(&["q"]);
    t.wait_within("the shell again", Duration::from_secs(20), |s| {
        s.contains("the demo ended") && s.matches(PROMPT.trim_end()).count() >= 2
    });
    let _ = std::fs::remove_dir_all(&cache);
}
