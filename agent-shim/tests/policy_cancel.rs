//! Operator cancels through the real protocol, on a C target under the real preload: each
//! refusal with its reason, dry run, a cooperative cancel whose release is measured by the
//! next snapshot, a pthread_cancel that runs the thread's cleanup handlers, the audit log —
//! and the target running on and exiting normally.

mod common;
mod policy_support;

use common::{TempDir, compile_c, compile_cpp, include_flag};
use heaptui_protocol::{Mechanism, PolicyAnswer, Push, Verdict};
use policy_support::{POLICY_C, Target};

const POLICY: &str = r#"
min_release = "1 MiB"

[[permit]]
thread = "runaway"

[[permit]]
thread = "legacy"
mechanism = "pthread_cancel"

[[permit]]
thread = "small"

[[permit]]
thread = "short"
"#;

fn refused(v: &heaptui_protocol::CancelVerdict) -> &str {
    match &v.verdict {
        Verdict::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?} ({v:?})"),
    }
}

#[test]
fn operator_cancels_refusals_and_audit() {
    let dir = TempDir::new("policy-cancel");
    let exe = compile_c(&dir, "policy_threads", POLICY_C, &[&include_flag()]);
    let mut t = Target::start(&dir, &exe, &[], Some(POLICY));
    let tids = t.tids();
    let mut c = t.client();

    let PolicyAnswer::Loaded { summary, text, .. } = c.policy() else {
        panic!("policy not loaded");
    };
    assert_eq!(summary.permits.len(), 4);
    assert_eq!(summary.min_release, 1 << 20);
    assert_eq!(text, POLICY);

    let before = c.snapshot();
    let rows_before = c.threads();

    // Refusals, each with its reason.
    let v = c.cancel(tids["holder-1"], false);
    assert!(refused(&v).starts_with("not permitted"), "{v:?}");
    let v = c.cancel(tids["small"], false);
    assert!(refused(&v).starts_with("below min_release"), "{v:?}");
    let small_release = v.predicted_release.expect("a prediction");
    assert!((4096..1 << 20).contains(&small_release), "{v:?}");
    let v = c.cancel(999_999_999, false);
    assert!(refused(&v).starts_with("unknown tid 999999999"), "{v:?}");
    t.command("end-short");
    t.wait_line("short ended");
    let v = c.cancel(tids["short"], false);
    assert!(refused(&v).contains("already gone"), "{v:?}");

    // Dry run: decided, logged, nothing done.
    let runaway = tids["runaway"];
    let v = c.cancel(runaway, true);
    assert_eq!(v.verdict, Verdict::DryRun, "{v:?}");
    assert_eq!(v.mechanism, Some(Mechanism::Cooperative));
    let dry_predicted = v.predicted_release.unwrap();
    // It looked for a cancel request twice since, and went on.
    t.wait_rounds("runaway", 2);
    assert!(t.thread_alive(runaway));
    assert!(!t.lines().iter().any(|l| l.starts_with("runaway:")));

    // The cooperative cancel, with a second client watching the pushes.
    let mut watcher = t.client();
    watcher.subscribe();
    let v = c.cancel(runaway, false);
    assert_eq!(v.verdict, Verdict::Done, "{v:?}");
    assert_eq!(
        v.rule.as_deref(),
        Some("permit #1: thread = \"runaway\" (cooperative)")
    );
    let predicted = v.predicted_release.unwrap();
    // 128 blocks of 64 KiB, and nothing else of its own.
    assert!(
        (8 << 20..(8 << 20) + (64 << 10)).contains(&predicted),
        "{predicted}"
    );
    assert_eq!(predicted, dry_predicted);
    let line = t.wait_line("runaway: cancelled");
    assert!(line.contains("handler ran, freed 8388608 bytes"), "{line}");
    t.wait_thread_gone(runaway);
    // Its measured line comes once it ended (before anything else changes the heap).
    t.wait_audit("the runaway's measured line", |a| {
        a.iter().any(|l| l["event"] == "measured")
    });

    // The next snapshot shows the release, within 5% of the prediction.
    let after = c.snapshot();
    let freed = before.totals.bytes as i64 - after.totals.bytes as i64;
    let diff = (freed - predicted as i64).abs() as f64;
    assert!(
        diff <= 0.05 * predicted as f64,
        "freed {freed} bytes, predicted {predicted}"
    );
    // Other threads untouched.
    let rows_after = c.threads();
    for name in ["holder-1", "holder-2", "small", "legacy"] {
        let tid = tids[name];
        assert_eq!(
            rows_after[&tid].total, rows_before[&tid].total,
            "{name} changed: {:?} -> {:?}",
            rows_before[&tid], rows_after[&tid]
        );
    }
    assert!(!rows_after.contains_key(&runaway));

    // pthread_cancel of a plain C thread with cleanup handlers.
    let legacy = tids["legacy"];
    let v = c.cancel(legacy, false);
    assert_eq!(v.verdict, Verdict::Done, "{v:?}");
    assert_eq!(v.mechanism, Some(Mechanism::PthreadCancel));
    let line = t.wait_line("legacy: cleanup ran");
    assert!(line.contains("freed 2097152 bytes"), "{line}");
    t.wait_line("legacy: second cleanup ran");
    t.wait_thread_gone(legacy);

    // The audit log: one decision line per decision, then the measured lines.
    let audit = t.wait_audit("two measured lines", |a| {
        a.iter().filter(|l| l["event"] == "measured").count() == 2
    });
    let decisions: Vec<_> = audit.iter().filter(|l| l["event"] == "decision").collect();
    assert_eq!(decisions.len(), 7, "{audit:#?}");
    let verdicts: Vec<&str> = decisions
        .iter()
        .map(|l| l["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        [
            "refused", "refused", "refused", "refused", "dry-run", "done", "done"
        ]
    );
    for l in &decisions {
        assert!(l["time"].as_str().unwrap().ends_with('Z'));
        assert!(
            l["who"]
                .as_str()
                .unwrap()
                .starts_with("operator \"policy-test\" from "),
            "{l}"
        );
    }
    let done = decisions[5];
    assert_eq!(done["tid"], runaway);
    assert_eq!(done["thread"], "runaway");
    assert_eq!(done["mechanism"], "cooperative");
    assert_eq!(done["predicted_release"], predicted);
    assert_eq!(done["handler_registered"], true);
    let measured = audit
        .iter()
        .find(|l| l["event"] == "measured" && l["decision"] == done["decision"])
        .expect("measured line of the runaway cancel");
    assert_eq!(measured["ended"], serde_json::json!([runaway]));
    let m = measured["measured_release"].as_u64().unwrap() as f64;
    assert!(
        (m - predicted as f64).abs() <= 0.05 * predicted as f64,
        "{measured}"
    );
    // The watcher was pushed the same measured release.
    let Push::ReleaseMeasured(pushed) = watcher.wait_push(
        "the runaway's measured release",
        |p| matches!(p, Push::ReleaseMeasured(m) if m.tids == [runaway]),
    ) else {
        unreachable!()
    };
    assert_eq!(pushed.decision, done["decision"].as_u64().unwrap());
    assert_eq!(pushed.predicted, predicted);
    assert_eq!(pushed.measured, measured["measured_release"].as_u64());

    // The target ran on and exits normally; the others were never touched.
    let lines = t.quit();
    for ok in ["holder-1 ok", "holder-2 ok", "small ok", "exit ok"] {
        assert!(lines.iter().any(|l| l == ok), "{ok} missing: {lines:?}");
    }
    assert!(
        !lines.iter().any(|l| l.contains("not cancelled")),
        "{lines:?}"
    );
}

#[test]
fn without_a_policy_every_cancel_is_refused() {
    let dir = TempDir::new("policy-none");
    let exe = compile_c(&dir, "policy_threads", POLICY_C, &[&include_flag()]);
    let t = Target::start(&dir, &exe, &[], None);
    let mut c = t.client();
    assert_eq!(c.policy(), PolicyAnswer::NotLoaded);
    let v = c.cancel(t.tids()["runaway"], false);
    assert!(refused(&v).starts_with("no policy"), "{v:?}");
    let audit = t.audit();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["verdict"], "refused");
    let lines = t.quit();
    assert!(
        lines.iter().any(|l| l == "runaway: not cancelled"),
        "{lines:?}"
    );
}

#[test]
fn an_invalid_policy_refuses_with_the_parse_error_and_harms_nothing() {
    let dir = TempDir::new("policy-invalid");
    let exe = compile_c(&dir, "policy_threads", POLICY_C, &[&include_flag()]);
    let bad =
        "min_release = \"1 MiB\"\n[[permit]]\nthread = \"runaway\"\nmechansim = \"cooperative\"\n";
    let t = Target::start(&dir, &exe, &[], Some(bad));
    let stderr = t.stderr();
    assert!(
        stderr.contains("policy.toml invalid: line 4, column 1"),
        "{stderr}"
    );
    assert!(stderr.contains("mechansim"), "{stderr}");
    let mut c = t.client();
    let PolicyAnswer::Invalid { path, error } = c.policy() else {
        panic!("an invalid policy must be answered as Invalid");
    };
    assert!(path.ends_with("policy.toml"), "{path}");
    assert!(
        error.contains("line 4, column 1") && error.contains("mechansim"),
        "{error}"
    );
    let v = c.cancel(t.tids()["runaway"], false);
    let r = refused(&v);
    assert!(
        r.starts_with("policy invalid: policy file ") && r.contains("mechansim"),
        "{r}"
    );
    let lines = t.quit();
    assert!(
        lines.iter().any(|l| l == "runaway: not cancelled"),
        "{lines:?}"
    );
}

#[test]
fn a_policy_dry_run_decides_and_logs_but_never_acts() {
    let dir = TempDir::new("policy-dry");
    let exe = compile_c(&dir, "policy_threads", POLICY_C, &[&include_flag()]);
    let policy = format!("dry_run = true\n{POLICY}");
    let mut t = Target::start(&dir, &exe, &[], Some(&policy));
    let tids = t.tids();
    let mut c = t.client();
    for name in ["runaway", "legacy"] {
        let v = c.cancel(tids[name], false);
        assert_eq!(v.verdict, Verdict::DryRun, "{v:?}");
    }
    // Each went twice through the point where a cancel would act (runaway's request check,
    // legacy's cancellation point) and went on.
    t.wait_rounds("runaway", 2);
    t.wait_rounds("legacy", 2);
    assert!(t.thread_alive(tids["runaway"]) && t.thread_alive(tids["legacy"]));
    let audit = t.audit();
    assert_eq!(audit.len(), 2, "{audit:#?}");
    assert!(
        audit
            .iter()
            .all(|l| l["verdict"] == "dry-run" && l["dry_run_by"] == "policy")
    );
    let lines = t.quit();
    assert!(
        lines.iter().any(|l| l == "runaway: not cancelled"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "legacy: not cancelled"),
        "{lines:?}"
    );
}

const CPP: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <atomic>
#include <string>
#include <vector>

static std::atomic<int> stopping{0};
static std::atomic<int> named{0};

struct Loud {
    ~Loud() { printf("cpp: destructor ran\n"); fflush(stdout); }
};

__attribute__((noinline)) static void work() {
    Loud loud;
    std::vector<std::string> rows;
    for (int i = 0; i < 64; i++) rows.emplace_back(32 << 10, 'x');
    pthread_setname_np(pthread_self(), "cpp-worker");
    printf("tid cpp-worker %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    named = 1;
    while (!stopping.load()) usleep(5000);
    printf("cpp-worker %s\n", rows.size() == 64 && rows[63][0] == 'x' ? "ok" : "CORRUPT");
}

static void *run(void *) { work(); return nullptr; }

int main() {
    pthread_t t;
    pthread_create(&t, nullptr, run, nullptr);
    while (!named.load()) usleep(1000);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin))
        if (strncmp(line, "quit", 4) == 0) break;
    stopping = 1;
    pthread_join(t, nullptr);
    printf("exit ok\n");
    return 0;
}
"#;

#[test]
fn pthread_cancel_is_refused_over_cpp_cleanup_code() {
    let dir = TempDir::new("policy-cpp");
    let exe = compile_cpp(&dir, "cpp_worker", CPP, &[]);
    let policy = "[[permit]]\nthread = \"cpp-*\"\nmechanism = \"pthread_cancel\"\n";
    let t = Target::start(&dir, &exe, &[], Some(policy));
    let tid = t.tids()["cpp-worker"];
    let mut c = t.client();
    let v = c.cancel(tid, false);
    let r = refused(&v);
    assert!(r.starts_with("cleanup code on the stack"), "{r}");
    assert!(r.contains("work"), "names the frame: {r}");
    assert!(v.predicted_release.unwrap() >= 64 * (32 << 10), "{v:?}");
    // A dry run is refused the same way: the check is part of the decision.
    let v = c.cancel(tid, true);
    assert!(
        refused(&v).starts_with("cleanup code on the stack"),
        "{v:?}"
    );
    assert!(t.thread_alive(tid));
    let lines = t.quit();
    assert!(lines.iter().any(|l| l == "cpp-worker ok"), "{lines:?}");
    assert!(
        lines.iter().any(|l| l == "cpp: destructor ran"),
        "{lines:?}"
    );
}
