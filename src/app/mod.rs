//! The TUI's state and what actions and source events do to it.
//!
//! [`App`] owns the view stack, the connection's state, the process and snapshot figures, the
//! requests in flight and where their answers go. Keys arrive as [`Action`]s (the binding table
//! maps keys), the source's answers and pushes as [`SourceEvent`]s; both only change state and
//! queue requests through the [`SourceHandle`]. Nothing here draws, blocks or awaits: `ui` reads
//! this state to draw, `tui` runs the loop.

pub mod action;
pub mod ages;
pub mod cancel;
pub mod chart;
pub mod fuzzy;
pub mod growth;
pub mod help;
pub mod layout;
pub mod leaks;
pub mod other;
pub mod rows;
pub mod table;
pub mod told_apart;
pub mod units;
pub mod views;

use std::collections::HashMap;
use std::time::Duration;

use heaptui_protocol::GroupId;
use heaptui_protocol::message::{
    Direction, ErrorKind, FramePage, LiveCounters, MAX_PAGE_ROWS, MeasuredRelease, ObjectFilter,
    ObjectPage, Page, PolicyAnswer, ProcessInfo, Push, Referrer, RequestBody, RequestId, Response,
    ShortageReport, SiteKey, SitePage, SnapshotId, SnapshotInfo, Sort, ThreadKey, ThreadPage,
};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseEvent, MouseEventKind};
use ratatui::layout::Rect;

use crate::source::{SourceEvent, SourceHandle};
use action::{Action, Screen};
use cancel::{CancelDialog, CancelPhase};
use rows::{OBJECT_KEYS, ReleaseRow};
use table::{PAGE_ROWS, PagedTable, SortSpec, TableModel};
use views::{
    FramesView, GroupItem, GroupView, HomeTab, HomeView, ObjectItem, ObjectView, ObjectsOrigin,
    ObjectsView, SetRelease, View, ViewKind,
};

/// The status while an `r` snapshot is on its way.
const TAKING_SNAPSHOT: &str = "taking a snapshot…";

/// How long a memory-shortage report stays in the banner, by the agent's clock.
pub const SHORTAGE_BANNER_MS: u64 = 60_000;

/// How often a live agent is asked again for its kept peak snapshot, in milliseconds.
pub const PEAK_EVERY_MS: u64 = 5_000;

/// Incoming/outgoing references asked for per object.
pub const REFS_PAGE: u32 = 500;

/// The state of the link to the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Connection {
    Connecting,
    Connected,
    Disconnected {
        reason: String,
    },
    /// The source went away for good (the events channel closed).
    Closed,
}

/// Where an answer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Process,
    Snapshot,
    Subscribe,
    /// The counters of the recent past, for the header's chart.
    History,
    /// The process again, for the header's kept peak snapshot and automatic rule.
    Peak,
    /// The agent's policy, for the cancel dialog.
    Policy,
    /// The cancel dialog's request for `tid`.
    Cancel {
        tid: u32,
        dry_run: bool,
    },
    /// A view by serial; `generation` for paged tables whose order may have changed since.
    View {
        serial: u64,
        generation: u64,
    },
}

/// Text being typed into the filter of the top view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    pub text: String,
}

pub struct App {
    source: SourceHandle,
    pub live: bool,
    pub description: String,
    /// The live agent's address, for the header.
    pub address: Option<String>,
    pub connection: Connection,
    /// The data shown is from before a disconnect.
    pub stale: bool,
    pub process: Option<ProcessInfo>,
    pub snapshot: Option<SnapshotInfo>,
    pub counters: Option<LiveCounters>,
    /// Live and allocated bytes over time, for the header's chart.
    pub chart: chart::Chart,
    /// The source is a recording: no heap graph, the other views only.
    pub recording: bool,
    /// The source captures a process without an agent from outside: snapshots, but no
    /// counters, policy or cancel.
    pub outside: bool,
    pub stack: Vec<View>,
    pub help: bool,
    /// Rows the help is scrolled by, when it is taller than the terminal.
    pub help_scroll: u16,
    /// The help shows what the figures mean rather than the keys (`Tab` in the help).
    pub help_figures: bool,
    /// The cancel confirmation, drawn over the screen while open.
    pub cancel: Option<CancelDialog>,
    /// The agent's memory-shortage policy, as last asked (live agents).
    pub policy: Option<PolicyAnswer>,
    /// The latest memory-shortage episode the agent pushed, shown in the banner for
    /// [`SHORTAGE_BANNER_MS`].
    pub shortage: Option<ShortageReport>,
    pub input: Option<Input>,
    pub exact_bytes: bool,
    pub auto_refresh: bool,
    pub refresh_interval: Duration,
    /// One line for the operator: the last error or what just happened.
    pub status: Option<String>,
    pub quit: bool,
    /// Wall clock, milliseconds since the Unix epoch, as of the last tick (drawing reads it,
    /// never the clock, so that a frame is a function of the state).
    pub now_ms: u64,
    /// The terminal's size, for table heights and mouse clicks.
    pub size: Rect,
    /// Where the top screen's item list was last drawn (Group, Object), for clicks.
    list_hit: std::cell::Cell<Option<layout::ListHit>>,
    snapshot_asked: Option<u64>,
    /// When the process was last asked for its peak snapshot (live agents).
    peak_asked: u64,
    pending: HashMap<RequestId, Target>,
    next_serial: u64,
}

impl App {
    pub fn new(source: SourceHandle, description: String, size: Rect) -> Self {
        let mut app = App {
            live: source.is_live(),
            recording: source.is_recording(),
            outside: source.is_outside(),
            source,
            description,
            address: None,
            connection: Connection::Connecting,
            stale: false,
            process: None,
            snapshot: None,
            counters: None,
            chart: chart::Chart::default(),
            stack: Vec::new(),
            help: false,
            help_scroll: 0,
            help_figures: false,
            cancel: None,
            policy: None,
            shortage: None,
            input: None,
            exact_bytes: false,
            auto_refresh: false,
            refresh_interval: Duration::from_secs(5),
            status: None,
            quit: false,
            now_ms: 0,
            size,
            list_hit: std::cell::Cell::new(None),
            snapshot_asked: None,
            peak_asked: 0,
            pending: HashMap::new(),
            next_serial: 0,
        };
        let home = app.view(ViewKind::Home(Box::new(HomeView::new())));
        app.stack.push(home);
        app.fit();
        app
    }

    pub fn top(&self) -> &View {
        self.stack.last().expect("the home view is never popped")
    }

    fn top_mut(&mut self) -> &mut View {
        self.stack
            .last_mut()
            .expect("the home view is never popped")
    }

    pub fn screen(&self) -> Screen {
        self.top().screen()
    }

    pub fn home(&self) -> &HomeView {
        match &self.stack[0].kind {
            ViewKind::Home(home) => home,
            _ => unreachable!("the stack starts with home"),
        }
    }

    fn home_mut(&mut self) -> &mut HomeView {
        match &mut self.stack[0].kind {
            ViewKind::Home(home) => home,
            _ => unreachable!("the stack starts with home"),
        }
    }

    /// Requests in flight.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    pub fn snapshot_id(&self) -> SnapshotId {
        self.snapshot.as_ref().map_or(SnapshotId(0), |s| s.snapshot)
    }

    pub fn areas(&self) -> layout::Areas {
        layout::areas(self.size, self.screen(), self.banner().is_some())
    }

    /// The banner's text, when there is one: a disconnect, else a recent memory shortage.
    pub fn banner(&self) -> Option<String> {
        match &self.connection {
            Connection::Disconnected { reason } => Some(format!(
                "disconnected: {reason} — reattaching…; the data shown is stale"
            )),
            Connection::Closed => Some("the source has gone; the data shown is stale".into()),
            _ => self
                .shortage
                .as_ref()
                .filter(|r| self.now_ms.saturating_sub(r.unix_ms) < SHORTAGE_BANNER_MS)
                .map(cancel::shortage_line),
        }
    }

    /// The other view (units, leaks, growth, ages) with this serial, if it is still open.
    fn other_view(&mut self, serial: u64) -> Option<&mut other::OtherView> {
        self.stack.iter_mut().find_map(|v| match &mut v.kind {
            ViewKind::Other(view) if v.serial == serial => Some(view),
            _ => None,
        })
    }

    fn view(&mut self, kind: ViewKind) -> View {
        self.next_serial += 1;
        View {
            serial: self.next_serial,
            kind,
        }
    }

    fn ask(&mut self, target: Target, body: RequestBody) {
        let id = self.source.request(body);
        self.pending.insert(id, target);
    }

    fn ask_view(&mut self, serial: u64, body: RequestBody) {
        self.ask(
            Target::View {
                serial,
                generation: 0,
            },
            body,
        );
    }

    // ----- source events -------------------------------------------------------------------

    pub fn on_source(&mut self, event: SourceEvent) {
        match event {
            SourceEvent::Connected { description } => {
                self.description = description;
                self.connection = Connection::Connected;
                // Answers to requests of the lost connection will not come.
                self.pending.clear();
                if let Some(dialog) = &mut self.cancel
                    && matches!(dialog.phase, CancelPhase::Predicting | CancelPhase::Sending)
                {
                    dialog.failed(
                        "the connection dropped before the agent answered (its audit log says what it did)"
                            .into(),
                    );
                }
                self.snapshot_asked = None;
                self.ask(Target::Process, RequestBody::ProcessInfo);
                if self.agent() {
                    self.ask(Target::Subscribe, RequestBody::Subscribe);
                    self.ask(Target::Policy, RequestBody::Policy);
                }
                if self.agent() || self.recording {
                    self.ask(Target::History, RequestBody::CounterHistory);
                }
            }
            SourceEvent::Disconnected { reason } => {
                self.connection = Connection::Disconnected { reason };
                self.stale = true;
            }
            SourceEvent::Push(Push::Counters(counters)) => self.on_counters(counters),
            SourceEvent::Push(Push::Shortage(report)) => {
                self.status = Some(cancel::shortage_line(&report));
                self.shortage = Some(report);
            }
            SourceEvent::Push(Push::ReleaseMeasured(m)) => self.on_measured(m),
            SourceEvent::Answer { id, body } => {
                if let Some(target) = self.pending.remove(&id) {
                    self.on_answer(target, body);
                }
            }
            #[allow(unreachable_patterns)]
            SourceEvent::Push(_) => {}
        }
        self.fit();
    }

    /// The source's events channel closed: it will say nothing more.
    pub fn on_source_closed(&mut self) {
        self.connection = Connection::Closed;
        self.stale = true;
    }

    fn on_counters(&mut self, counters: LiveCounters) {
        self.counters = Some(counters);
        self.chart.push(counters);
    }

    fn on_answer(&mut self, target: Target, body: Response) {
        match (target, body) {
            (Target::Cancel { tid, dry_run }, body) => self.on_cancel_answer(tid, dry_run, body),
            (Target::Policy, Response::Policy(policy)) => {
                if let PolicyAnswer::Invalid { .. } = &policy {
                    self.status = Some(cancel::policy_line(&policy));
                }
                if let Some(dialog) = &mut self.cancel {
                    dialog.policy = Some(policy.clone());
                }
                self.policy = Some(policy);
            }
            // An agent that cannot say: the dialog goes without the policy line.
            (Target::Policy, _) => {}
            // An agent without its history keeps the pushes alone: nothing to tell.
            (Target::History, Response::CounterHistory(h)) => {
                self.chart.set_history(&h.samples);
                if self.counters.is_none() {
                    self.counters = h.samples.last().copied();
                }
            }
            (Target::History, _) => {}
            // Only what changes on its own: the automatic peak snapshot and the rule.
            (Target::Peak, Response::ProcessInfo(info)) => {
                if let Some(p) = &mut self.process {
                    p.peak_snapshot = info.peak_snapshot;
                    p.snapshot_rule = info.snapshot_rule;
                    p.threads = info.threads;
                }
            }
            (Target::Peak, _) => {}
            // The other views show why they have no rows in place of the rows.
            (Target::View { serial, .. }, Response::Error(e))
                if (e.kind != ErrorKind::NoSnapshot || !self.live)
                    && self
                        .stack
                        .iter()
                        .any(|v| v.serial == serial && matches!(v.kind, ViewKind::Other(_))) =>
            {
                if let Some(view) = self.other_view(serial) {
                    view.failed(e.message);
                }
            }
            (_, Response::Error(e)) => {
                if let Target::View { serial, generation } = target
                    && let Some(ViewKind::Objects(view)) = self
                        .stack
                        .iter_mut()
                        .find(|v| v.serial == serial)
                        .map(|v| &mut v.kind)
                {
                    view.table.failed(generation);
                }
                if e.kind == ErrorKind::NoSnapshot && self.live {
                    self.take_snapshot();
                } else {
                    self.status = Some(e.message);
                }
                if target == Target::Snapshot {
                    self.snapshot_asked = None;
                }
            }
            (Target::Process, Response::ProcessInfo(info)) => {
                if self.recording {
                    // Recomputed from the replayed events: figures, not a sample in time.
                    self.counters = Some(info.counters);
                } else if info.counters.unix_ms != 0 {
                    self.on_counters(info.counters);
                }
                let snapshot = info.snapshot.clone();
                self.process = Some(info);
                match snapshot {
                    Some(s) => self.on_snapshot(s),
                    None if self.live => self.take_snapshot(),
                    None if self.recording => self.open_recording(),
                    None => self.status = Some("the source has no snapshot".into()),
                }
            }
            (Target::Snapshot, Response::Snapshot(info)) => {
                self.snapshot_asked = None;
                // The answer to "taking a snapshot…": that status has done its job (others,
                // such as a measured release, stay).
                if self.status.as_deref() == Some(TAKING_SNAPSHOT) {
                    self.status = None;
                }
                self.on_snapshot(info);
            }
            (Target::Subscribe, _) => {}
            (Target::View { serial, generation }, body) => {
                let Some(at) = self.stack.iter().position(|v| v.serial == serial) else {
                    return; // the view was closed meanwhile
                };
                self.on_view_answer(at, generation, body);
            }
            (_, other) => {
                self.status = Some(format!("unexpected answer: {}", other.kind()));
            }
        }
    }

    /// A snapshot to show: the views that name its ids are closed if it is a new one, the
    /// others reloaded.
    fn on_snapshot(&mut self, info: SnapshotInfo) {
        let new = self.snapshot.as_ref().map(|s| s.snapshot) != Some(info.snapshot);
        let had = self.snapshot.is_some();
        self.snapshot = Some(info);
        self.stale = false;
        if new && had && self.stack.iter().any(View::snapshot_scoped) {
            let keep = self
                .stack
                .iter()
                .position(View::snapshot_scoped)
                .unwrap_or(self.stack.len());
            self.stack.truncate(keep);
            self.status = Some(format!(
                "new snapshot #{}: group and object screens closed (their ids belong to the old one)",
                self.snapshot_id().0
            ));
        }
        for at in 0..self.stack.len() {
            self.load(at);
        }
    }

    /// A recording has no heap graph: it opens on the allocation units, and says so.
    fn open_recording(&mut self) {
        self.status = Some(
            "a recording: no heap graph (threads, groups, leaks need a snapshot); u units · A ages"
                .into(),
        );
        if self.stack.len() == 1 {
            self.push(ViewKind::Other(other::OtherView::new(
                other::OtherKind::Units,
            )));
        }
    }

    fn take_snapshot(&mut self) {
        if self.snapshot_asked.is_none() {
            self.snapshot_asked = Some(self.now_ms);
            self.ask(Target::Snapshot, RequestBody::TakeSnapshot);
        }
    }

    /// Asks for everything the view at `at` shows.
    fn load(&mut self, at: usize) {
        let serial = self.stack[at].serial;
        let snapshot = self.snapshot_id();
        let body = match &mut self.stack[at].kind {
            ViewKind::Home(home) => {
                let tids: Vec<u32> = home.marked.iter().copied().collect();
                let sites = home.sites_asked;
                self.ask_view(serial, threads_request(0));
                if sites {
                    self.ask_view(serial, sites_request(0));
                }
                if !tids.is_empty() {
                    self.ask_release(tids);
                }
                return;
            }
            ViewKind::Frames(f) => RequestBody::Frames {
                tid: f.tid,
                page: Page::FIRST,
            },
            ViewKind::Group(g) => RequestBody::Group {
                snapshot,
                group: g.id,
            },
            ViewKind::Object(o) => RequestBody::Object {
                snapshot,
                object: o.index,
                refs: Page::new(0, REFS_PAGE),
            },
            ViewKind::Objects(_) => {
                self.request_pages(at);
                return;
            }
            ViewKind::Other(v) => v.request(),
        };
        self.ask_view(serial, body);
    }

    fn ask_release(&mut self, tids: Vec<u32>) {
        let serial = self.stack[0].serial;
        self.home_mut().set_release = Some(SetRelease {
            tids: tids.clone(),
            bytes: None,
        });
        self.ask_view(serial, RequestBody::Release { tids });
    }

    /// Asks for the pages an object list's viewport needs.
    fn request_pages(&mut self, at: usize) {
        let serial = self.stack[at].serial;
        let snapshot = self.snapshot_id();
        let ViewKind::Objects(view) = &mut self.stack[at].kind else {
            return;
        };
        let sort = view.table.sort();
        let sort = Sort {
            key: OBJECT_KEYS[sort.column].unwrap_or(heaptui_protocol::ObjectKey::Size),
            direction: if sort.descending {
                Direction::Descending
            } else {
                Direction::Ascending
            },
        };
        let generation = view.table.generation();
        // The agent filters the whole list (a million members), not just the pages here.
        let filter = view.table.filter().map(ObjectFilter::new);
        let mut bodies = Vec::new();
        for (first, count) in view.table.wanted_runs() {
            (first..first + count).for_each(|p| view.table.mark_requested(p));
            let page = Page::new(first * PAGE_ROWS, count * PAGE_ROWS);
            bodies.push(match &view.origin {
                ObjectsOrigin::Group(group) => RequestBody::GroupObjects {
                    snapshot,
                    group: *group,
                    sort,
                    page,
                    filter: filter.clone(),
                },
                ObjectsOrigin::Site { site, .. } => RequestBody::SiteObjects {
                    snapshot,
                    site: *site,
                    sort,
                    page,
                    filter: filter.clone(),
                },
            });
        }
        for body in bodies {
            self.ask(Target::View { serial, generation }, body);
        }
    }

    fn on_view_answer(&mut self, at: usize, generation: u64, body: Response) {
        let serial = self.stack[at].serial;
        let mut follow: Option<RequestBody> = None;
        match (&mut self.stack[at].kind, body) {
            (ViewKind::Home(home), Response::Threads(ThreadPage { page, rows, .. })) => {
                let total = page.total as usize;
                let release: Vec<ReleaseRow> = rows
                    .iter()
                    .map(|t| ReleaseRow {
                        marked: home.marked.contains(&t.tid),
                        thread: t.clone(),
                    })
                    .collect();
                let got = rows.len();
                if page.offset == 0 {
                    home.threads.set_rows(rows, total);
                    home.release.set_rows(release, total);
                } else {
                    home.threads.extend(rows, total);
                    home.release.extend(release, total);
                }
                let next = page.offset as usize + got;
                if got > 0 && next < total {
                    follow = Some(threads_request(next as u32));
                }
            }
            (ViewKind::Home(home), Response::Sites(SitePage { page, rows, .. })) => {
                let total = page.total as usize;
                let got = rows.len();
                if page.offset == 0 {
                    home.sites.set_rows(rows, total);
                } else {
                    home.sites.extend(rows, total);
                }
                let next = page.offset as usize + got;
                if got > 0 && next < total {
                    follow = Some(sites_request(next as u32));
                }
            }
            (ViewKind::Home(home), Response::Release(answer)) => {
                if let Some(set) = &mut home.set_release
                    && set.tids == answer.tids
                {
                    set.bytes = Some(answer.bytes);
                }
            }
            (ViewKind::Frames(view), Response::Frames(FramePage { page, rows, .. })) => {
                let total = page.total as usize;
                let got = rows.len();
                if page.offset == 0 {
                    view.table.set_rows(rows, total);
                } else {
                    view.table.extend(rows, total);
                }
                if let Some(frame) = view.select_frame
                    && view.table.select_where(|r| r.index == frame)
                {
                    view.select_frame = None;
                }
                let next = page.offset as usize + got;
                if got > 0 && next < total {
                    follow = Some(RequestBody::Frames {
                        tid: view.tid,
                        page: Page::new(next as u32, MAX_PAGE_ROWS),
                    });
                }
            }
            (ViewKind::Group(view), Response::Group(info)) => {
                view.info = Some(info);
                view.selected = 0;
            }
            (ViewKind::Objects(view), Response::Objects(ObjectPage { page, rows, .. })) => {
                view.table
                    .receive(generation, page.offset, page.total, rows);
            }
            (ViewKind::Object(view), Response::Object(detail)) => {
                view.detail = Some(detail);
                view.selected = 0;
            }
            (ViewKind::Other(view), body) => match view.receive(body) {
                Ok(next) => follow = next,
                Err(kind) => self.status = Some(format!("unexpected answer: {kind}")),
            },
            (_, other) => {
                self.status = Some(format!("unexpected answer: {}", other.kind()));
            }
        }
        if let Some(body) = follow {
            self.ask_view(serial, body);
        }
    }

    /// Whether the source is a live agent (counters, policy, peak snapshot, cancel).
    fn agent(&self) -> bool {
        self.live && !self.outside
    }

    // ----- cancel --------------------------------------------------------------------------

    /// `c`: the confirmation for the selected thread, with the agent's dry run asked for.
    fn open_cancel(&mut self) {
        if self.outside {
            let pid = self.process.as_ref().map_or(0, |p| p.pid);
            self.status = Some(format!(
                "cancelling a thread needs the agent: process {pid} was started without it \
                 (restart it with LD_PRELOAD=$(heaptui agent-path))"
            ));
            return;
        }
        if !self.live {
            self.status = Some(
                "a snapshot file has no running threads: cancelling needs a live agent (`heaptui attach`)"
                    .into(),
            );
            return;
        }
        let home = self.home();
        let selected = match home.tab {
            HomeTab::Threads => home.threads.selected_row().map(|t| (t.tid, t.name.clone())),
            HomeTab::Release => home
                .release
                .selected_row()
                .map(|r| (r.thread.tid, r.thread.name.clone())),
            HomeTab::Sites => None,
        };
        let Some((tid, name)) = selected else {
            self.status = Some("no thread selected to cancel".into());
            return;
        };
        let mut dialog = CancelDialog::new(tid, name);
        dialog.policy = self.policy.clone();
        self.cancel = Some(dialog);
        // The policy may have changed since it was asked (a restarted agent): ask again.
        self.ask(Target::Policy, RequestBody::Policy);
        // The agent predicts on a fresh snapshot of its own and logs the dry run: the numbers
        // shown are never the client's.
        self.ask(
            Target::Cancel { tid, dry_run: true },
            RequestBody::Cancel { tid, dry_run: true },
        );
    }

    /// A key while the cancel dialog is open: it takes every key.
    fn on_dialog_key(&mut self, key: KeyEvent) {
        match action::dialog_action(key) {
            Some(Action::Quit) => self.quit = true,
            Some(Action::Back) => self.cancel = None,
            Some(Action::Confirm) => {
                let Some(dialog) = &mut self.cancel else {
                    return;
                };
                let tid = dialog.tid;
                if dialog.confirm() {
                    self.ask(
                        Target::Cancel {
                            tid,
                            dry_run: false,
                        },
                        RequestBody::Cancel {
                            tid,
                            dry_run: false,
                        },
                    );
                }
            }
            _ => {}
        }
    }

    fn on_cancel_answer(&mut self, tid: u32, dry_run: bool, body: Response) {
        let verdict = match body {
            Response::Cancel(v) => Ok(v),
            Response::Error(e) => Err(e.message),
            other => Err(format!("unexpected answer: {}", other.kind())),
        };
        let done =
            matches!(&verdict, Ok(v) if v.verdict == heaptui_protocol::message::Verdict::Done);
        let expected = if dry_run {
            CancelPhase::Predicting
        } else {
            CancelPhase::Sending
        };
        match &mut self.cancel {
            Some(dialog) if dialog.tid == tid && dialog.phase == expected => match verdict {
                Ok(v) => dialog.answered(v),
                Err(message) => dialog.failed(message),
            },
            // The dialog was closed meanwhile: only the real outcome is worth a line.
            _ if !dry_run => {
                self.status = Some(match verdict {
                    Ok(v) => format!("cancel of thread {tid}: {}", verdict_line(&v)),
                    Err(message) => format!("cancel of thread {tid} failed: {message}"),
                });
            }
            _ => {}
        }
        if done && !dry_run {
            self.status = Some(format!(
                "thread {tid} cancelled; the agent measures the release once it has ended"
            ));
        }
    }

    /// The agent measured what a cancel freed (its own snapshots before and after: the
    /// figures on screen may be older than the decision's): shown in the dialog and the
    /// status line, and a new snapshot shows the threads gone.
    fn on_measured(&mut self, m: MeasuredRelease) {
        let text = cancel::measured_line(&m);
        let threads = m
            .tids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        self.status = Some(format!("cancel of thread {threads}: {text}"));
        if let Some(dialog) = &mut self.cancel
            && m.tids.contains(&dialog.tid)
            && dialog.phase == CancelPhase::Finished
        {
            dialog.measured = Some(text);
        }
        if self.live && self.connection == Connection::Connected {
            self.take_snapshot();
        }
    }

    // ----- actions -------------------------------------------------------------------------

    /// A key: typed into the filter when one is being edited, else looked up in the table.
    pub fn on_key(&mut self, key: KeyEvent) {
        // A terminal sends Alt-x as Escape followed by x, so an Escape typed just before a key
        // arrives as Alt+that key (crossterm cannot tell them apart). heaptui binds nothing to
        // Alt: read it as the two keys the user most likely pressed.
        if let (KeyCode::Char(c), true) = (key.code, key.modifiers == KeyModifiers::ALT) {
            self.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
            self.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
            return;
        }
        if self.input.is_some() {
            self.on_input_key(key);
        } else if self.cancel.is_some() {
            self.on_dialog_key(key);
        } else if self.help {
            // Any key closes the help, but the moves scroll it when it is taller than the
            // terminal; q still quits.
            let page = help::page(self.size, self.screen(), self.help_figures);
            let (max, rows) = (i32::from(page.max_scroll), i32::from(page.rows.max(1)));
            if matches!(key.code, KeyCode::Tab | KeyCode::BackTab) {
                // The other page: keys, or what the figures mean.
                self.help_figures = !self.help_figures;
                self.help_scroll = 0;
                self.fit();
                return;
            }
            match action::action_for(key, self.screen()) {
                Some(Action::Quit) => self.quit = true,
                Some(Action::Up) if max > 0 => self.scroll_help(-1),
                Some(Action::Down) if max > 0 => self.scroll_help(1),
                Some(Action::PageUp) if max > 0 => self.scroll_help(-rows),
                Some(Action::PageDown) if max > 0 => self.scroll_help(rows),
                Some(Action::Top) if max > 0 => self.scroll_help(-max),
                Some(Action::Bottom) if max > 0 => self.scroll_help(max),
                _ => self.help = false,
            }
        } else if let Some(action) = action::action_for(key, self.screen()) {
            self.act(action);
        }
        self.fit();
    }

    /// Scrolls the help by `by` rows, within what the terminal's size leaves hidden.
    fn scroll_help(&mut self, by: i32) {
        let max = i32::from(help::page(self.size, self.screen(), self.help_figures).max_scroll);
        self.help_scroll = (i32::from(self.help_scroll) + by).clamp(0, max) as u16;
    }

    fn on_input_key(&mut self, key: KeyEvent) {
        let Some(input) = &mut self.input else { return };
        let mut text = input.text.clone();
        match key.code {
            KeyCode::Enter => {
                self.input = None;
                return;
            }
            KeyCode::Esc => {
                self.input = None;
                text.clear();
            }
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c) => text.push(c),
            _ => return,
        }
        if let Some(input) = &mut self.input {
            input.text = text.clone();
        }
        self.set_query(&text);
    }

    /// Filters the top view's list.
    pub fn set_query(&mut self, query: &str) {
        match &mut self.stack.last_mut().expect("home").kind {
            ViewKind::Home(home) => match home.tab {
                HomeTab::Threads => home.threads.set_query(query),
                HomeTab::Release => home.release.set_query(query),
                HomeTab::Sites => home.sites.set_query(query),
            },
            ViewKind::Frames(v) => v.table.set_query(query),
            ViewKind::Objects(v) => v.table.set_query(query),
            ViewKind::Other(v) => v.set_query(query),
            ViewKind::Group(_) | ViewKind::Object(_) => {}
        }
        self.fit();
    }

    pub fn act(&mut self, action: Action) {
        let (screen, status) = (self.screen(), self.status.clone());
        self.perform(action);
        // A message is about the screen it was given on: leaving that screen drops it, unless
        // the key that moved gave a new one.
        if self.screen() != screen && self.status == status {
            self.status = None;
        }
    }

    fn perform(&mut self, action: Action) {
        match action {
            Action::Quit => self.quit = true,
            Action::Help => {
                self.help = !self.help;
                self.help_scroll = 0;
                self.help_figures = false;
            }
            Action::Back => {
                if self.stack.len() > 1 {
                    self.stack.pop();
                }
            }
            Action::Up => self.move_by(-1),
            Action::Down => self.move_by(1),
            Action::PageUp => self.move_by(-(self.page_rows() as isize)),
            Action::PageDown => self.move_by(self.page_rows() as isize),
            Action::Top => self.move_by(isize::MIN / 2),
            Action::Bottom => self.move_by(isize::MAX / 2),
            Action::Left | Action::Right => {
                if let ViewKind::Frames(view) = &mut self.top_mut().kind {
                    let n = view
                        .table
                        .selected_row()
                        .map_or(0, |f| views::frame_referents(f).len());
                    if n > 0 {
                        view.referent = if action == Action::Left {
                            (view.referent + n - 1) % n
                        } else {
                            (view.referent + 1) % n
                        };
                    }
                }
            }
            Action::NextTab | Action::PrevTab => {
                let home = self.home_mut();
                let i = HomeTab::ALL
                    .iter()
                    .position(|&t| t == home.tab)
                    .unwrap_or(0);
                let n = HomeTab::ALL.len();
                let i = if action == Action::NextTab {
                    (i + 1) % n
                } else {
                    (i + n - 1) % n
                };
                self.select_tab(HomeTab::ALL[i]);
            }
            Action::Mark => self.toggle_mark(),
            Action::Cancel => self.open_cancel(),
            // Only the cancel dialog confirms; its keys do not reach here.
            Action::Confirm => {}
            Action::ClearMarks => {
                let home = self.home_mut();
                home.marked.clear();
                home.set_release = None;
                home.release.rows_mut().for_each(|r| r.marked = false);
            }
            Action::Filter => {
                let query = self.top_query().unwrap_or_default();
                if self.top_query().is_some() {
                    self.input = Some(Input { text: query });
                }
            }
            Action::Sort(n) => {
                // The n-th column on the screen: on a narrow one, columns that gave way are
                // not counted (key 3 is the third column the operator sees).
                let n = n.saturating_sub(1) as usize;
                if let Some(column) = self.shown_column(n) {
                    self.sort_by(column);
                }
            }
            Action::Refresh => {
                if self.live {
                    self.take_snapshot();
                    self.status = Some(TAKING_SNAPSHOT.into());
                } else {
                    self.status =
                        Some("a snapshot file does not change: `r` needs a live agent".into());
                }
            }
            Action::AutoRefresh => {
                if self.live {
                    self.auto_refresh = !self.auto_refresh;
                    self.status = Some(if self.auto_refresh {
                        format!(
                            "automatic snapshots every {} s",
                            self.refresh_interval.as_secs_f64()
                        )
                    } else {
                        "automatic snapshots off".into()
                    });
                } else {
                    self.status = Some(
                        "a snapshot file does not change: auto-refresh needs a live agent".into(),
                    );
                }
            }
            Action::ExactBytes => self.exact_bytes = !self.exact_bytes,
            Action::Open(kind) => self.push(ViewKind::Other(other::OtherView::new(kind))),
            Action::Switch(switch) => {
                let at = self.stack.len() - 1;
                if let ViewKind::Other(view) = &mut self.top_mut().kind
                    && view.switch(switch)
                {
                    self.load(at);
                }
            }
            Action::Enter => self.enter(),
        }
    }

    pub fn select_tab(&mut self, tab: HomeTab) {
        let serial = self.stack[0].serial;
        let home = self.home_mut();
        home.tab = tab;
        if tab == HomeTab::Sites && !home.sites_asked {
            home.sites_asked = true;
            if self.snapshot.is_some() {
                self.ask_view(serial, sites_request(0));
            }
        }
        self.fit();
    }

    /// The query of the top view's list; `None` when the screen has no list to filter.
    pub fn top_query(&self) -> Option<String> {
        Some(
            match &self.top().kind {
                ViewKind::Home(home) => match home.tab {
                    HomeTab::Threads => home.threads.query(),
                    HomeTab::Release => home.release.query(),
                    HomeTab::Sites => home.sites.query(),
                },
                ViewKind::Frames(v) => v.table.query(),
                ViewKind::Objects(v) => v.table.query(),
                ViewKind::Other(v) => return Some(v.query()),
                ViewKind::Group(_) | ViewKind::Object(_) => return None,
            }
            .to_string(),
        )
    }

    fn toggle_mark(&mut self) {
        let home = self.home_mut();
        let tid = match home.tab {
            HomeTab::Threads => home.threads.selected_row().map(|r| r.tid),
            HomeTab::Release => home.release.selected_row().map(|r| r.thread.tid),
            HomeTab::Sites => None,
        };
        let Some(tid) = tid else { return };
        let marked = if home.marked.remove(&tid) {
            false
        } else {
            home.marked.insert(tid);
            true
        };
        home.release
            .rows_mut()
            .filter(|r| r.thread.tid == tid)
            .for_each(|r| r.marked = marked);
        let tids: Vec<u32> = home.marked.iter().copied().collect();
        if tids.is_empty() {
            home.set_release = None;
        } else {
            self.ask_release(tids);
        }
    }

    /// The column drawn `n`-th (from 0) on the current screen's table, if there is one.
    fn shown_column(&self, n: usize) -> Option<usize> {
        let width = self.areas().main.width;
        let exact = self.exact_bytes;
        let nth = |shown: Vec<(usize, u16)>| shown.get(n).map(|c| c.0);
        match &self.top().kind {
            ViewKind::Home(home) => match home.tab {
                HomeTab::Threads => nth(home.threads.shown_columns(width, exact)),
                HomeTab::Release => nth(home.release.shown_columns(width, exact)),
                HomeTab::Sites => nth(home.sites.shown_columns(width, exact)),
            },
            ViewKind::Frames(v) => nth(v.table.shown_columns(width, exact)),
            ViewKind::Objects(v) => nth(v.table.shown_columns(width, exact)),
            ViewKind::Other(v) => v.shown_column(n, width, exact),
            ViewKind::Group(_) | ViewKind::Object(_) => None,
        }
    }

    fn sort_by(&mut self, column: usize) {
        let at = self.stack.len() - 1;
        match &mut self.top_mut().kind {
            ViewKind::Home(home) => match home.tab {
                HomeTab::Threads => home.threads.sort_by(column),
                HomeTab::Release => home.release.sort_by(column),
                HomeTab::Sites => home.sites.sort_by(column),
            },
            ViewKind::Frames(v) => v.table.sort_by(column),
            ViewKind::Objects(v) => {
                if OBJECT_KEYS.get(column).copied().flatten().is_some() {
                    v.table.sort_by(column);
                }
                self.fit();
                self.request_pages(at);
            }
            ViewKind::Other(v) => v.sort_by(column),
            ViewKind::Group(_) | ViewKind::Object(_) => {}
        }
    }

    fn page_rows(&self) -> usize {
        layout::table_rows(self.areas().main).max(1)
    }

    fn move_by(&mut self, delta: isize) {
        let at = self.stack.len() - 1;
        match &mut self.top_mut().kind {
            ViewKind::Home(home) => match home.tab {
                HomeTab::Threads => home.threads.move_by(delta),
                HomeTab::Release => home.release.move_by(delta),
                HomeTab::Sites => home.sites.move_by(delta),
            },
            ViewKind::Frames(v) => {
                v.table.move_by(delta);
                v.referent = 0;
            }
            ViewKind::Objects(v) => v.table.move_by(delta),
            ViewKind::Group(v) => {
                let n = v.info.as_ref().map_or(0, |i| views::group_items(i).len());
                v.selected = step(v.selected, delta, n);
            }
            ViewKind::Object(v) => {
                let n = v
                    .detail
                    .as_ref()
                    .map_or(0, |d| views::object_items(d).len());
                v.selected = step(v.selected, delta, n);
            }
            ViewKind::Other(v) => v.move_by(delta),
        }
        self.request_pages(at);
    }

    fn push(&mut self, kind: ViewKind) {
        let view = self.view(kind);
        self.stack.push(view);
        self.fit();
        let at = self.stack.len() - 1;
        self.load(at);
    }

    fn open_group(&mut self, id: GroupId) {
        self.push(ViewKind::Group(GroupView {
            id,
            info: None,
            selected: 0,
        }));
    }

    fn open_object(&mut self, index: u32) {
        self.push(ViewKind::Object(ObjectView {
            index,
            detail: None,
            selected: 0,
        }));
    }

    fn open_objects(&mut self, origin: ObjectsOrigin) {
        self.push(ViewKind::Objects(ObjectsView {
            origin,
            table: PagedTable::new(SortSpec {
                column: 1,
                descending: true,
            }),
        }));
    }

    fn open_frames(&mut self, tid: u32, name: String, frame: Option<u32>) {
        let mut view = FramesView::new(tid, name);
        view.select_frame = frame;
        self.push(ViewKind::Frames(view));
    }

    /// Enter: open what the selected row names.
    fn enter(&mut self) {
        enum Open {
            Frames(u32, String, Option<u32>),
            Group(GroupId),
            Objects(ObjectsOrigin),
            Object(u32),
            Nothing(&'static str),
        }
        let open = match &self.top().kind {
            ViewKind::Home(home) => match home.tab {
                HomeTab::Threads => home
                    .threads
                    .selected_row()
                    .map(|t| Open::Frames(t.tid, t.name.clone(), None)),
                HomeTab::Release => home
                    .release
                    .selected_row()
                    .map(|r| Open::Frames(r.thread.tid, r.thread.name.clone(), None)),
                HomeTab::Sites => home.sites.selected_row().map(|s| {
                    Open::Objects(ObjectsOrigin::Site {
                        site: s.site,
                        label: s.label.clone(),
                    })
                }),
            },
            ViewKind::Frames(v) => v.table.selected_row().map(|f| {
                let referents = views::frame_referents(f);
                match referents.get(v.referent.min(referents.len().saturating_sub(1))) {
                    Some(&id) => Open::Group(id),
                    None => Open::Nothing("this frame refers to no shared group"),
                }
            }),
            ViewKind::Group(v) => v.info.as_ref().and_then(|info| {
                let items = views::group_items(info);
                Some(match items.get(v.selected)? {
                    GroupItem::Entry(row) => Open::Object(row.index),
                    GroupItem::Members(_) => Open::Objects(ObjectsOrigin::Group(v.id)),
                    GroupItem::Direct(id) | GroupItem::Developed(id) => Open::Group(*id),
                })
            }),
            ViewKind::Objects(v) => v.table.selected_row().map(|o| Open::Object(o.index)),
            ViewKind::Object(v) => v.detail.as_ref().and_then(|d| {
                let items = views::object_items(d);
                Some(match items.get(v.selected)? {
                    ObjectItem::Group(id) => Open::Group(*id),
                    ObjectItem::Dominator(o) => Open::Object(*o),
                    ObjectItem::Outgoing(row) => Open::Object(row.index),
                    ObjectItem::Incoming(Referrer::Object(row)) => Open::Object(row.index),
                    ObjectItem::Incoming(Referrer::Frame { tid, frame, .. }) => {
                        let name = self
                            .home()
                            .threads
                            .rows()
                            .iter()
                            .find(|t| t.tid == *tid)
                            .map_or_else(String::new, |t| t.name.clone());
                        Open::Frames(*tid, name, Some(*frame))
                    }
                    ObjectItem::Incoming(Referrer::Globals) => {
                        Open::Nothing("the globals root: the writable data of loaded modules")
                    }
                })
            }),
            ViewKind::Other(v) => v.enter(!self.recording).map(|open| match open {
                other::OtherOpen::SiteObjects { site, label } => {
                    Open::Objects(ObjectsOrigin::Site { site, label })
                }
                other::OtherOpen::Object(index) => Open::Object(index),
                other::OtherOpen::Frames(tid, name) => Open::Frames(tid, name, None),
                other::OtherOpen::Nothing(why) => Open::Nothing(why),
            }),
        };
        match open {
            Some(Open::Frames(tid, name, frame)) => self.open_frames(tid, name, frame),
            Some(Open::Group(id)) => self.open_group(id),
            Some(Open::Objects(origin)) => self.open_objects(origin),
            Some(Open::Object(index)) => self.open_object(index),
            Some(Open::Nothing(why)) => self.status = Some(why.to_string()),
            None => {}
        }
    }

    // ----- terminal ------------------------------------------------------------------------

    pub fn on_resize(&mut self, width: u16, height: u16) {
        self.size = Rect::new(0, 0, width, height);
        self.fit();
    }

    /// Drawing says where it put the top screen's item list (the one thing drawing writes:
    /// a click must find the item where the operator saw it).
    pub fn record_list(&self, area: Rect, first: usize, len: usize) {
        self.list_hit.set(Some(layout::ListHit {
            serial: self.top().serial,
            area,
            first,
            len,
        }));
    }

    /// A click on the Group or Object screen's items, or on a referent of the selected frame:
    /// the item under it is selected, a click on the selected one opens it. `false` when the
    /// click is on none of these (a table row, a tab…).
    fn click_item(&mut self, column: u16, row: u16) -> bool {
        let serial = self.top().serial;
        let hit = self.list_hit.get().filter(|h| h.serial == serial);
        let item = hit.and_then(|h| h.item_at(column, row));
        let detail = self.areas().detail;
        let selected = match &mut self.top_mut().kind {
            ViewKind::Group(v) => &mut v.selected,
            ViewKind::Object(v) => &mut v.selected,
            // The selected frame's referents, under its table.
            ViewKind::Frames(v) => {
                let Some(detail) = detail else { return false };
                let referents = v.table.selected_row().map(views::frame_referents);
                let Some(i) =
                    referents.and_then(|ids| layout::referent_at(detail, &ids, column, row))
                else {
                    return false;
                };
                if i == v.referent {
                    self.act(Action::Enter);
                } else {
                    v.referent = i;
                }
                return true;
            }
            _ => return false,
        };
        match item {
            Some(i) if i == *selected => self.act(Action::Enter),
            Some(i) => *selected = i,
            None => {}
        }
        true
    }

    /// Wheel scrolls the list; a click selects a table row or a Group/Object item, a click on
    /// the selected one opens it, a click on a tab shows it.
    pub fn on_mouse(&mut self, mouse: MouseEvent) {
        if self.help {
            // Over the help, the wheel scrolls it and a click closes it, as a key does.
            match mouse.kind {
                MouseEventKind::ScrollDown => self.scroll_help(3),
                MouseEventKind::ScrollUp => self.scroll_help(-3),
                MouseEventKind::Down(_) => self.help = false,
                _ => {}
            }
            return;
        }
        match mouse.kind {
            MouseEventKind::ScrollDown => self.move_by(3),
            MouseEventKind::ScrollUp => self.move_by(-3),
            MouseEventKind::Down(_) => {
                let areas = self.areas();
                if let Some(tabs) = areas.tabs
                    && mouse.row == tabs.y
                {
                    if let Some(tab) = tab_at(mouse.column.saturating_sub(tabs.x)) {
                        self.select_tab(tab);
                    }
                    return;
                }
                if self.click_item(mouse.column, mouse.row) {
                    self.fit();
                    return;
                }
                let Some(row) = layout::table_row_at(areas.main, mouse.row) else {
                    return;
                };
                let Some((offset, selected)) = self.top_cursor() else {
                    return;
                };
                let target = offset + row;
                if target == selected {
                    self.act(Action::Enter);
                } else {
                    self.move_by(target as isize - selected as isize);
                }
            }
            _ => {}
        }
        self.fit();
    }

    fn top_cursor(&self) -> Option<(usize, usize)> {
        let c = match &self.top().kind {
            ViewKind::Home(home) => match home.tab {
                HomeTab::Threads => home.threads.cursor(),
                HomeTab::Release => home.release.cursor(),
                HomeTab::Sites => home.sites.cursor(),
            },
            ViewKind::Frames(v) => v.table.cursor(),
            ViewKind::Objects(v) => v.table.cursor(),
            ViewKind::Other(v) => v.cursor(),
            ViewKind::Group(_) | ViewKind::Object(_) => return None,
        };
        Some((c.offset, c.selected))
    }

    /// Gives the top view's table the height the layout leaves it, and asks for the pages
    /// that come into view.
    fn fit(&mut self) {
        let rows = layout::table_rows(self.areas().main);
        let at = self.stack.len() - 1;
        match &mut self.top_mut().kind {
            ViewKind::Home(home) => {
                home.threads.set_height(rows);
                home.release.set_height(rows);
                home.sites.set_height(rows);
            }
            ViewKind::Frames(v) => v.table.set_height(rows),
            ViewKind::Objects(v) => v.table.set_height(rows),
            ViewKind::Other(v) => v.set_height(rows),
            ViewKind::Group(_) | ViewKind::Object(_) => {}
        }
        if self.snapshot.is_some() {
            self.request_pages(at);
        }
    }

    /// The clock ticked: auto-refresh when due.
    pub fn tick(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        let due = self.snapshot.as_ref().is_some_and(|s| {
            now_ms.saturating_sub(s.taken_unix_ms) >= self.refresh_interval.as_millis() as u64
        });
        if self.auto_refresh && self.live && self.connection == Connection::Connected && due {
            self.take_snapshot();
        }
        // The agent replaces its peak snapshot on its own (HEAPTUI_AUTO_SNAPSHOT).
        if self.agent()
            && self.connection == Connection::Connected
            && now_ms.saturating_sub(self.peak_asked) >= PEAK_EVERY_MS
        {
            self.peak_asked = now_ms;
            self.ask(Target::Peak, RequestBody::ProcessInfo);
        }
    }
}

/// The tab under column `x` of the tab bar (as `ui` draws it: ` Title ` then `│`).
pub fn tab_at(x: u16) -> Option<HomeTab> {
    let mut start = 0u16;
    for tab in HomeTab::ALL {
        let width = tab.title().chars().count() as u16 + 3;
        if x >= start && x < start + width {
            return Some(tab);
        }
        start += width;
    }
    None
}

/// One line for a cancel verdict.
pub fn verdict_line(v: &heaptui_protocol::message::CancelVerdict) -> String {
    use heaptui_protocol::message::Verdict;
    match &v.verdict {
        Verdict::Done => "done".into(),
        Verdict::DryRun => "dry run: the policy decided and logged it, nothing was done".into(),
        Verdict::Refused(reason) => format!("refused: {reason}"),
    }
}

fn step(selected: usize, delta: isize, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let target = if delta < 0 {
        selected.saturating_sub(delta.unsigned_abs())
    } else {
        selected.saturating_add(delta as usize)
    };
    target.min(n - 1)
}

fn threads_request(offset: u32) -> RequestBody {
    RequestBody::Threads {
        sort: Sort::desc(ThreadKey::Total),
        page: Page::new(offset, MAX_PAGE_ROWS),
    }
}

fn sites_request(offset: u32) -> RequestBody {
    RequestBody::Sites {
        sort: Sort::desc(SiteKey::LiveBytes),
        page: Page::new(offset, MAX_PAGE_ROWS),
    }
}

#[cfg(test)]
pub mod other_tests;
#[cfg(test)]
pub mod testing;
#[cfg(test)]
mod tests;
