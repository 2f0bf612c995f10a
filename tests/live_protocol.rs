//! The agent's server under stress, through the real protocol against a real target: several
//! clients, clients that vanish, stall or send garbage, counters against the target's own
//! count. Every bad connection must be closed with a logged reason while the target runs on
//! and finishes with its normal output.

mod live_common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use heaptui_protocol::*;
use live_common::*;
use proptest::prelude::*;

fn finishes_normally(target: Target) -> String {
    let (out, log) = target.finish();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n", "log: {log}");
    assert_eq!(out.status.code(), Some(0), "log: {log}");
    log
}

#[test]
fn two_clients_at_once_get_their_own_answers_and_pushes() {
    let dir = Scratch::new("two");
    let exe = shapes(dir.path());
    let target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    let mut a = target.client();
    let mut b = target.client();
    let snap = a.snapshot();
    // b sees the snapshot a took, and both interleave requests on their own connections.
    let id_b = b.send(RequestBody::Threads {
        sort: Sort::desc(ThreadKey::Total),
        page: Page::new(0, 2),
    });
    let id_a = a.send(RequestBody::ProcessInfo);
    let ServerMessage::Response { id, body } = b.next_message() else {
        panic!("push before subscribing")
    };
    assert_eq!(id, id_b);
    let Response::Threads(page) = *body else {
        panic!("{body:?}")
    };
    assert_eq!(page.snapshot, snap.snapshot);
    assert_eq!(page.rows.len(), 2);
    assert_eq!(page.page.total, 5);
    let ServerMessage::Response { id, body } = a.next_message() else {
        panic!()
    };
    assert_eq!(id, id_a);
    let Response::ProcessInfo(info) = *body else {
        panic!("{body:?}")
    };
    assert_eq!(info.pid, target.child.id());
    assert_eq!(info.snapshot.as_ref().unwrap().snapshot, snap.snapshot);
    assert!(info.snapshot.as_ref().unwrap().held_bytes > 0);

    // Subscribed, a receives counters about once a second; b, not subscribed, gets none.
    assert!(matches!(
        a.ask(RequestBody::Subscribe),
        Response::Subscribed { interval_ms: 1000 }
    ));
    let started = Instant::now();
    let mut pushes = 0;
    while pushes < 3 {
        if let ServerMessage::Push(Push::Counters(c)) = a.next_message() {
            assert!(c.live_bytes > 0 && c.allocated_bytes >= c.live_bytes);
            pushes += 1;
        }
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(matches!(b.ask(RequestBody::Policy), Response::Policy(_)));
    assert!(matches!(
        a.ask(RequestBody::Unsubscribe),
        Response::Unsubscribed
    ));
    drop((a, b));
    finishes_normally(target);
}

#[test]
fn a_client_that_vanishes_mid_answer_can_come_back() {
    let dir = Scratch::new("vanish");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    // Enough objects that the snapshot file is megabytes.
    assert_eq!(target.command("many 200000"), "ok");
    let mut a = target.client();
    let snap = a.snapshot();
    assert!(snap.totals.objects >= 200_000);
    a.send(RequestBody::SnapshotData {
        snapshot: snap.snapshot,
        offset: 0,
    });
    let mut first = [0u8; 1000];
    a.raw.read_exact(&mut first).unwrap();
    drop(a);
    wait_for_log(&target, "closed: ", 1, Duration::from_secs(20));
    // Back again: the same snapshot answers.
    let mut b = target.client();
    let Response::Threads(page) = b.ask(RequestBody::Threads {
        sort: Sort::desc(ThreadKey::Total),
        page: Page::FIRST,
    }) else {
        panic!()
    };
    assert_eq!(page.snapshot, snap.snapshot);
    let main = page
        .rows
        .iter()
        .find(|r| r.tid == target.child.id())
        .unwrap();
    assert!(main.proprietary >= 200_000 * 48, "{main:?}");
    drop(b);
    finishes_normally(target);
}

#[test]
fn a_stalled_half_frame_delays_neither_other_clients_nor_the_target() {
    let dir = Scratch::new("stall");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    // One client stalls inside a request frame, another before finishing its hello.
    let mut staller = target.client();
    staller.raw.write_all(&[0, 0, 0, 100, 1, 2, 3]).unwrap();
    let mut mute = target.raw();
    mute.write_all(&[0, 0]).unwrap();

    let mut other = target.client();
    for _ in 0..20 {
        let started = Instant::now();
        other.counters();
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    let started = Instant::now();
    assert!(target.command("alloc 1000").starts_with("allocated "));
    assert!(started.elapsed() < Duration::from_secs(2));
    other.snapshot();

    // Both stallers are closed after their timeouts, with the reason logged.
    let log = wait_for_log(&target, "then nothing for", 1, Duration::from_secs(20));
    assert!(
        log.contains("sent 7 bytes of a frame, then nothing for 5 s"),
        "{log}"
    );
    wait_for_log(
        &target,
        "refused at the handshake",
        1,
        Duration::from_secs(20),
    );
    assert_eq!(staller.raw.read_to_close(), b"");
    drop(other);
    finishes_normally(target);
}

/// A hello frame of any version and token.
fn hello_frame(version: u32, token: &str) -> Vec<u8> {
    let mut hello = Hello::new(token, "test");
    hello.version = version;
    to_frame(&hello).unwrap()
}

/// The server's refusal, from the bytes it sent before closing.
fn refusal(bytes: &[u8]) -> Refusal {
    let mut d = FrameDecoder::new(HANDSHAKE_MAX_FRAME_LEN);
    d.push(bytes).unwrap();
    let payload = d.next_frame().unwrap().expect("a welcome frame");
    match decode_welcome(&payload).unwrap().admission {
        Admission::Refused(r) => r,
        other => panic!("admitted: {other:?}"),
    }
}

#[test]
fn bad_connections_are_closed_with_a_logged_reason_and_the_target_runs_on() {
    let dir = Scratch::new("bad");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);

    let mut garbage = target.raw();
    garbage.write_all(b"\0\0\0\x08garbage!").unwrap();
    let r = refusal(&garbage.read_to_close());
    assert_eq!(r.reason, RefusalReason::BadMagic);

    let mut oversized = target.raw();
    oversized.write_all(&u32::MAX.to_be_bytes()).unwrap();
    oversized.read_to_close();

    let mut wrong_version = target.raw();
    wrong_version
        .write_all(&hello_frame(99, &target.token()))
        .unwrap();
    let r = refusal(&wrong_version.read_to_close());
    assert_eq!(r.reason, RefusalReason::VersionMismatch);
    assert!(r.message.contains("99"), "{}", r.message);

    let mut wrong_token = target.raw();
    wrong_token
        .write_all(&hello_frame(PROTOCOL_VERSION, "guess"))
        .unwrap();
    assert_eq!(
        refusal(&wrong_token.read_to_close()).reason,
        RefusalReason::WrongToken
    );

    let mut request_first = target.raw();
    let request = Request {
        id: RequestId(1),
        body: RequestBody::ProcessInfo,
    };
    request_first
        .write_all(&to_frame(&request).unwrap())
        .unwrap();
    assert_eq!(
        refusal(&request_first.read_to_close()).reason,
        RefusalReason::NotHello
    );

    // After the handshake: an oversized length, then a frame that is no request.
    let mut big = target.client();
    big.raw.write_all(&u32::MAX.to_be_bytes()).unwrap();
    big.raw.read_to_close();
    let mut junk = target.client();
    junk.raw.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).unwrap();
    junk.raw.read_to_close();

    // 1,000 connect/disconnect cycles.
    for _ in 0..1000 {
        drop(target.raw());
    }
    let log = wait_for_log(&target, "closed: ", 1007, Duration::from_secs(60));
    for reason in [
        "not a heaptui handshake (bad magic)",
        "exceeds the maximum of 4096 bytes",
        "protocol version mismatch",
        "wrong token",
        "process-info request before its hello",
        "bad frame: frame of 4294967295 bytes exceeds the maximum",
        "bad request (3 bytes)",
    ] {
        assert!(log.contains(reason), "no {reason:?} in the log:\n{log}");
    }
    // The server still serves, the target still works.
    assert!(target.command("alloc 10").starts_with("allocated "));
    target.client().snapshot();
    finishes_normally(target);
}

#[test]
fn live_counters_agree_with_the_targets_own_count() {
    let dir = Scratch::new("count");
    let exe = shapes(dir.path());
    let mut target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    let mut client = target.client();
    // The agent listens before `main` runs; main reads its first command only once its four
    // workers have allocated their blocks, so the first reading must wait for that answer or
    // it may miss them (8,006 bytes counted as the command's).
    assert_eq!(target.command("ready?"), "?");
    for n in [10, 1000, 5000] {
        let before = client.counters();
        let said = target.command(&format!("alloc {n}"));
        let after = client.counters();
        let words: Vec<&str> = said.split_whitespace().collect();
        assert_eq!(words[0], "allocated", "{said}");
        let allocated: u64 = words[1].parse().unwrap();
        let freed: u64 = words[3].parse().unwrap();
        assert_eq!(
            after.allocated_bytes - before.allocated_bytes,
            allocated,
            "{said}"
        );
        // Everything the command allocated it freed again.
        assert_eq!(allocated, freed);
        assert_eq!(after.live_bytes, before.live_bytes, "{said}");
        assert_eq!(after.live_blocks, before.live_blocks, "{said}");
        assert!(after.peak_live_bytes >= before.live_bytes + allocated / 2);
    }
    drop(client);
    finishes_normally(target);
}

#[test]
fn random_bytes_never_hurt_the_server_or_the_target() {
    let dir = Scratch::new("fuzz");
    let exe = shapes(dir.path());
    let target = Target::start(dir.path(), &exe, "127.0.0.1:0", &[]);
    let token = target.token();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    });
    // Raw garbage, and garbage after a valid hello (to reach the request decoder).
    let strategy = (
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    );
    runner
        .run(&strategy, |(after_hello, bytes)| {
            let mut raw = target.raw();
            raw.set_timeout(Some(Duration::from_secs(10)));
            if after_hello {
                raw.write_all(&hello_frame(PROTOCOL_VERSION, &token))
                    .unwrap();
            }
            let _ = raw.write_all(&bytes);
            let _ = raw.flush();
            // Close our side; the server answers or closes, never hangs past its timeouts.
            if let Raw::Tcp(s) = &raw {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            raw.read_to_close();
            Ok(())
        })
        .unwrap();
    let mut good = target.client();
    good.snapshot();
    drop(good);
    finishes_normally(target);
}
