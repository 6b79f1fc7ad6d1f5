use super::*;

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use crate::top::table::SortBy;

fn row(tid: u32, name: &str, wait_pct: f64) -> ThreadRow {
    ThreadRow {
        tid,
        name: name.into(),
        wait_pct,
        hold_pct: 100.0 - wait_pct,
        waits_per_s: 48.0,
        p99_ms: Some(15.5),
        most_for: Some(("spinner-1".into(), 51.0)),
        in_code: Some("spin (gil_workload.py:50)".into()),
        holding: None,
    }
}

fn process(pid: u32) -> ProcessLine {
    ProcessLine {
        described: Described {
            pid,
            rank: Some(0),
            python: Some("3.12.3".into()),
            command_line: "python3 gil_workload.py contention --threads 3".into(),
            started_ns: Some(0),
            ended: false,
        },
        headline: Some("GIL busy 100%, 2.0 waiting on average".into()),
    }
}

/// The screen as text, one string per row.
fn render(width: u16, height: u16, picture: &Picture<'_>) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| draw(frame, picture)).unwrap();
    let buffer = terminal.backend().buffer();
    (0..height)
        .map(|y| {
            (0..width)
                .map(|x| buffer[(x, y)].symbol().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn an_80_by_24_screen_shows_every_column_the_threads_and_the_keys() {
    let rows: Vec<ThreadRow> = (0..3)
        .map(|i| row(10 + i, &format!("spinner-{i}"), 66.5))
        .collect();
    let processes = [process(42)];
    let view = View::default();
    let picture = Picture {
        view: &view,
        span_s: Some(1.0),
        processes: &processes,
        rows: &rows,
        notice: None,
    };
    let screen = render(80, 24, &picture);
    let text = screen.join("\n");
    assert!(
        screen[0].starts_with("gilsample top   last 1.0 s   sorted by wait"),
        "{text}"
    );
    assert!(
        screen[1].starts_with("> pid 42 rank 0 Python 3.12.3: GIL busy 100%"),
        "{text}"
    );
    let header = &screen[3];
    for column in ["THREAD", "WAIT%", "HOLD%", "WAITS/S", "P99 MS", "HOLDING"] {
        assert!(header.contains(column), "{column} missing: {header}");
    }
    for i in 0..3 {
        let line = &screen[4 + i];
        assert!(line.starts_with(&format!("spinner-{i}")), "{text}");
        for figure in ["66.5", "33.5", "48.0", "15.5"] {
            assert!(line.contains(figure), "{figure} missing: {line}");
        }
    }
    assert!(
        screen[23].starts_with("q quit  s sort by hold  t since start  p pause"),
        "{text}"
    );
    assert!(screen.iter().all(|l| l.chars().count() == 80));
}

#[test]
fn a_large_screen_shows_the_code_in_full_and_several_processes_with_the_selected_marked() {
    let rows = [row(10, "spinner-0", 70.0)];
    let processes = [process(42), process(43)];
    let view = View {
        selected: 1,
        sort: SortBy::Hold,
        paused_at: Some(1),
        ..View::default()
    };
    let picture = Picture {
        view: &view,
        span_s: Some(2.0),
        processes: &processes,
        rows: &rows,
        notice: Some("skipping process 44: not Python"),
    };
    let screen = render(200, 50, &picture);
    let text = screen.join("\n");
    assert!(screen[0].contains("PAUSED"), "{text}");
    assert!(screen[1].starts_with("  [1/2] pid 42"), "{text}");
    assert!(screen[2].starts_with("> [2/2] pid 43"), "{text}");
    assert!(text.contains("spin (gil_workload.py:50)"), "{text}");
    assert!(text.contains("51% spinner-1"), "{text}");
    assert!(screen[48].starts_with("skipping process 44"), "{text}");
    assert!(screen[49].contains("<- -> process"), "{text}");
    assert!(screen[49].contains("p resume"), "{text}");
}

#[test]
fn before_the_first_samples_the_screen_says_so() {
    let view = View::default();
    let picture = Picture {
        view: &view,
        span_s: None,
        processes: &[],
        rows: &[],
        notice: None,
    };
    let screen = render(80, 24, &picture);
    assert!(screen[0].contains("waiting for the first samples"));
    assert!(screen[1].starts_with("attaching"));
}

#[test]
fn text_columns_are_as_wide_as_what_they_hold_and_the_code_gets_the_rest() {
    let rows = [row(10, "MainThread (python3)", 1.0)];
    let cells: Vec<[String; 8]> = rows.iter().map(ThreadRow::cells).collect();
    let mut long = cells.clone();
    long[0][7] = "blocked in clock_nanosleep".into();
    let wide = column_widths(200, &long);
    assert_eq!(wide[7], 26, "the holding whole where there is room");
    let wide = column_widths(200, &cells);
    assert_eq!(wide[0], 20, "the thread's name whole");
    assert_eq!(wide[5], 13, "51% spinner-1");
    assert_eq!(wide[7], 7, "HOLDING: its title");
    assert_eq!(
        wide.iter().sum::<u16>() + 7,
        200,
        "the code column takes the rest"
    );
    let narrow = column_widths(80, &cells);
    assert_eq!(narrow[6], CODE_MIN, "the others gave way first");
    assert_eq!(narrow.iter().sum::<u16>() + 7, 80);
    let tiny = column_widths(40, &cells);
    assert_eq!(tiny[0], 6, "down to the title's width");
}
