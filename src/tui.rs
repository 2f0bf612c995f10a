//! The terminal: setting it up, the one event loop, and restoring it on every way out
//! (return, error, panic).
//!
//! One event enum ([`Event`]: terminal input, source event, tick) and one `tokio::select!`
//! loop; the state changes only in `app`, the screen is drawn by `ui::render` when something
//! changed. Nothing else here decides anything.

use std::io::stdout;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use futures_util::StreamExt;
use ratatui::crossterm::event::{
    self as term, DisableMouseCapture, EnableMouseCapture, EventStream, KeyEventKind,
};
use ratatui::crossterm::execute;
use ratatui::layout::Rect;
use ratatui::{DefaultTerminal, Terminal};

use crate::app::App;
use crate::cli::AttachArgs;
use crate::client;
use crate::source::{self, SourceEvent, SourceEvents, SourceHandle};
use crate::ui;

/// What the loop reacts to.
#[derive(Debug)]
pub enum Event {
    Input(term::Event),
    /// `None`: the source has closed its channel.
    Source(Option<Box<SourceEvent>>),
    Tick,
}

/// How often the clock ticks (snapshot age, auto-refresh).
const TICK: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Options {
    /// Interval of `a` (automatic snapshots).
    pub refresh: Duration,
    /// The agent's address, shown in the header (live sources).
    pub address: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            refresh: Duration::from_secs(5),
            address: None,
        }
    }
}

/// `heaptui open FILE`: the TUI on a snapshot file, offline.
pub fn open(file: &Path) -> anyhow::Result<()> {
    if crate::offline::recording::is_recording(file) {
        return open_recording(file);
    }
    // The reader's errors name the file already.
    let graph = heaptui_analysis::snapshot::read_file(file)?;
    let description = format!("{} (snapshot file)", file.display());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (handle, events) = source::offline(graph, description.clone());
        run(handle, events, description, Options::default()).await
    })
}

/// `heaptui open REC` of a recording: replayed once before the screen opens (a damaged file
/// fails here, in one line), then the same screens as live, offline.
fn open_recording(file: &Path) -> anyhow::Result<()> {
    let recording = crate::offline::recording::load(file)?;
    let description = crate::offline::recording::describe(file, &recording);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (handle, events) = source::recording(recording, description.clone());
        run(handle, events, description, Options::default()).await
    })
}

/// `heaptui attach ADDR`: the TUI on a running agent. A wrong address or token fails here, in
/// one line, before the screen opens; later losses show as a banner while the client
/// reattaches.
pub fn attach(args: &AttachArgs) -> anyhow::Result<()> {
    // Below half a second the agent would spend its time stopping the world.
    let refresh = Duration::from_secs_f64(args.refresh.max(0.5));
    let (address, token) =
        match client::locate::resolve_source(&args.address, args.token_file.as_deref())? {
            client::locate::Source::Agent(address, token) => (address, token),
            client::locate::Source::Outside(pid) => return attach_outside(pid, refresh),
        };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (handle, events) = client::live::connect(&address, token).await?;
        let options = Options {
            refresh,
            address: Some(address.to_string()),
        };
        run(handle, events, address.to_string(), options).await
    })
}

/// `heaptui attach pid:PID` of a process started without the agent: the first capture from
/// outside before the screen opens (a refusal is one line on the terminal), then the TUI on
/// it; `r` and `a` capture again.
fn attach_outside(pid: u32, refresh: Duration) -> anyhow::Result<()> {
    let first = crate::outside::capture(pid).map_err(|e| anyhow::anyhow!("{e}"))?;
    for w in &first.warnings {
        eprintln!("heaptui: note: {w}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (handle, events) = crate::outside::source::source(pid, first);
        let options = Options {
            refresh,
            address: Some(format!("pid:{pid}")),
        };
        run(handle, events, format!("pid:{pid}"), options).await
    })
}

/// `heaptui run` and `heaptui demo` on a terminal: starts the program under the agent, shows
/// the TUI on it, and stops the program when the operator quits. Returns how it ended.
pub fn run_program(
    program: &[std::ffi::OsString],
    launch: &crate::launch::Launch,
    refresh_secs: f64,
) -> anyhow::Result<std::process::ExitStatus> {
    let target = crate::launch::start(program, launch)?;
    let address = target.address.clone();
    let description = format!(
        "{} on {address}",
        Path::new(&program[0])
            .file_name()
            .map_or_else(|| program[0].to_string_lossy(), |n| n.to_string_lossy())
    );
    let refresh = Duration::from_secs_f64(refresh_secs.max(0.5));
    let shown = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| {
            runtime.block_on(async {
                let (handle, events) =
                    client::live::connect(&address, client::TokenSource::Discover).await?;
                let options = Options {
                    refresh,
                    address: Some(address.to_string()),
                };
                run(handle, events, description, options).await
            })
        });
    // The program was started for this session: it ends with it, whatever happened.
    let status = target.stop()?;
    shown?;
    Ok(status)
}

/// Runs the TUI on a source until the operator quits; the terminal is restored whatever
/// happens, panics included.
pub async fn run(
    source: SourceHandle,
    events: SourceEvents,
    description: String,
    options: Options,
) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init().context(
        "cannot open the terminal UI: stdout is not a terminal (use `heaptui report` for text)",
    )?;
    install_panic_hook();
    let _ = execute!(stdout(), EnableMouseCapture);
    let result = event_loop(&mut terminal, source, events, description, options).await;
    restore();
    result
}

fn restore() {
    let _ = execute!(stdout(), DisableMouseCapture);
    ratatui::restore();
}

/// `ratatui::try_init` restores the screen on a panic; mouse reporting must go too, or the
/// shell would receive escape codes for every mouse move.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = execute!(stdout(), DisableMouseCapture);
        previous(info);
    }));
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn event_loop(
    terminal: &mut DefaultTerminal,
    source: SourceHandle,
    mut events: SourceEvents,
    description: String,
    options: Options,
) -> anyhow::Result<()> {
    let size = terminal.size()?;
    let mut app = App::new(
        source,
        description,
        Rect::new(0, 0, size.width, size.height),
    );
    app.refresh_interval = options.refresh;
    app.address = options.address;
    app.tick(now_ms());
    let mut input = EventStream::new();
    let mut tick = tokio::time::interval(TICK);
    let mut source_open = true;
    let mut dirty = true;
    loop {
        if dirty {
            draw(terminal, &app)?;
            dirty = false;
        }
        let event = tokio::select! {
            e = input.next() => match e {
                Some(e) => Event::Input(e.context("reading the terminal")?),
                None => break,
            },
            e = events.recv(), if source_open => Event::Source(e.map(Box::new)),
            _ = tick.tick() => Event::Tick,
        };
        dirty |= handle(&mut app, event, &mut source_open);
        // Answers often come in bursts (pages): take every one that is ready, draw once.
        while source_open && let Ok(e) = events.try_recv() {
            dirty |= handle(&mut app, Event::Source(Some(Box::new(e))), &mut source_open);
        }
        if app.quit {
            break;
        }
    }
    Ok(())
}

fn draw<B: ratatui::backend::Backend>(terminal: &mut Terminal<B>, app: &App) -> anyhow::Result<()>
where
    B::Error: Send + Sync + 'static,
{
    terminal.draw(|frame| ui::render(app, frame))?;
    Ok(())
}

/// Applies one event; whether the screen must be redrawn.
pub fn handle(app: &mut App, event: Event, source_open: &mut bool) -> bool {
    match event {
        Event::Input(term::Event::Key(key)) => {
            // Key releases (reported by some terminals) are not presses.
            if key.kind == KeyEventKind::Release {
                return false;
            }
            app.on_key(key);
        }
        Event::Input(term::Event::Mouse(mouse)) => app.on_mouse(mouse),
        Event::Input(term::Event::Resize(w, h)) => app.on_resize(w, h),
        Event::Input(_) => return false,
        Event::Source(Some(e)) => app.on_source(*e),
        Event::Source(None) => {
            *source_open = false;
            app.on_source_closed();
        }
        Event::Tick => app.tick(now_ms()),
    }
    true
}
