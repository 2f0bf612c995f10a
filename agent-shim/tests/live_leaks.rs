//! The leaks view (docs/reference.md §8 "Leaks") on a real target under the real preload, through
//! the real protocol: a loop that leaks a small list on every step — its head definitely lost, the
//! rest indirectly lost — and a lone block, grouped by allocation site, most bytes first, with the
//! site's objects one request away.

mod common;
mod policy_support;

use common::{TempDir, compile_c};
use heaptui_protocol::{LeakPage, ObjectKey, Page, RequestBody, Response, Sort};
use policy_support::{Client, Target};

/// On every `step`: `leak_list` drops a 10-node list (48-byte nodes) and `leak_lone` drops
/// one 100-byte block; `keep` holds one 64-byte block from a global, so it never leaks.
const LEAK_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct node { struct node *next; long payload[5]; };
static void *kept[8];
__attribute__((noinline)) static struct node *make_node(struct node *next) {
    struct node *n = malloc(sizeof *n);
    n->next = next;
    n->payload[0] = 1;
    return n;
}
__attribute__((noinline)) static void leak_list(void) {
    struct node *volatile head = NULL;
    for (int i = 0; i < 10; i++) head = make_node(head);
}
__attribute__((noinline)) static void leak_lone(void) {
    char *volatile lost = malloc(100);
    lost[0] = 1;
}
__attribute__((noinline)) static void *keep(void) {
    void *p = malloc(64);
    memset(p, 0, 64);
    return p;
}
/* Overwrites the dead stack below main's frame, where the leaking calls left their pointers. */
__attribute__((noinline)) static void scrub_stack(void) {
    volatile char pad[16384];
    memset((char *)pad, 0, sizeof pad);
}
int main(void) {
    char line[64];
    int n = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "quit", 4)) break;
        leak_list();
        leak_lone();
        kept[n] = keep();
        scrub_stack();
        n++;
        printf("stepped %d\n", n);
    }
    for (int i = 0; i < n; i++) free(kept[i]);
    return 0;
}
"#;

fn leaks(c: &mut Client) -> LeakPage {
    match c.request(RequestBody::Leaks { page: Page::FIRST }) {
        Response::Leaks(l) => l,
        other => panic!("leaks answered {other:?}"),
    }
}

#[test]
fn a_leaking_loop_is_reported_by_site_definitely_and_indirectly_lost() {
    let dir = TempDir::new("views-leaks");
    let exe = compile_c(&dir, "leaks", LEAK_C, &[]);
    let mut t = Target::start(&dir, &exe, &[], None);
    let mut c = t.client();
    for n in 1..=3 {
        t.command("step");
        t.wait_line(&format!("stepped {n}"));
    }
    c.snapshot();
    let page = leaks(&mut c);
    let row = |name: &str| {
        page.rows
            .iter()
            .find(|r| r.label.starts_with(&format!("{name} (")))
            .unwrap_or_else(|| panic!("no {name} leak row in {:#?}", page.rows))
    };
    // 48-byte nodes, 10 per step, 3 steps: each list's head is definitely lost (nothing
    // points to it), the 9 nodes behind it indirectly (only a lost block points to them).
    let list = row("make_node");
    assert_eq!(
        (list.definitely_lost_objects, list.definitely_lost),
        (3, 3 * 48)
    );
    assert_eq!(
        (list.indirectly_lost_objects, list.indirectly_lost),
        (27, 27 * 48)
    );
    assert!(
        list.frames.iter().any(|f| f.starts_with("leak_list")),
        "the site's stack names the leaking loop: {:?}",
        list.frames
    );
    let lone = row("leak_lone");
    assert_eq!(
        (lone.definitely_lost_objects, lone.definitely_lost),
        (3, 300)
    );
    assert_eq!(lone.indirectly_lost_objects, 0);
    assert!(
        !page.rows.iter().any(|r| r.label.starts_with("keep (")),
        "held blocks are not leaks: {:#?}",
        page.rows
    );
    // Most bytes first; the page holds every site.
    assert_eq!(page.rows[0].label, list.label);
    assert_eq!(page.page.total as usize, page.rows.len());

    // The site index drills into its objects: the 30 nodes.
    let objects = match c.request(RequestBody::SiteObjects {
        snapshot: page.snapshot,
        site: list.site,
        sort: Sort::desc(ObjectKey::Size),
        page: Page::FIRST,
        filter: None,
    }) {
        Response::Objects(o) => o,
        other => panic!("site objects answered {other:?}"),
    };
    assert_eq!(objects.page.total, 30);
    assert!(objects.rows.iter().all(|r| r.size == 48));

    // The target is unharmed and ends normally.
    let lines = t.quit();
    assert!(lines.iter().any(|l| l == "stepped 3"), "{lines:?}");
}
