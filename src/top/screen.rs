//! Drawing the full-screen view with ratatui: a title line, one line per process (its headline), the
//! selected process's threads as a table, a notice, and the keys. No colour: the header is in
//! reverse video and the selected process is marked with `>`, so a terminal without colour (or
//! without attributes at all) shows the same. Pure: it draws a `Picture` into a frame.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};

use crate::top::live::Described;
use crate::top::table::{COLUMNS, FIGURES, ThreadRow, fit};
use crate::top::view::{Shown, View};

/// One process's line.
#[derive(Clone, Debug)]
pub struct ProcessLine {
    pub described: Described,
    /// Its headline over the span shown; `None` before its first samples.
    pub headline: Option<String>,
}

/// Everything one frame shows.
pub struct Picture<'a> {
    pub view: &'a View,
    /// The span the figures are over, in seconds (the last interval can be shorter at the start).
    pub span_s: Option<f64>,
    pub processes: &'a [ProcessLine],
    /// The selected process's threads, sorted.
    pub rows: &'a [ThreadRow],
    /// The latest thing worth saying (a process skipped or ended).
    pub notice: Option<&'a str>,
}

/// Process lines shown at most; the selected one is always among them.
const MAX_PROCESS_LINES: usize = 4;

/// Rows of the screen the table cannot use: title, processes (at least one), blank, header,
/// notice, keys.
fn table_rows(height: u16, process_lines: usize) -> usize {
    usize::from(height).saturating_sub(4 + process_lines)
}

/// How many thread rows fit on a screen of `height` rows with `processes` processes.
pub fn visible_rows(height: u16, processes: usize) -> usize {
    table_rows(height, processes.clamp(1, MAX_PROCESS_LINES))
}

pub fn draw(frame: &mut Frame<'_>, picture: &Picture<'_>) {
    let area = frame.area();
    let process_lines = picture.processes.len().clamp(1, MAX_PROCESS_LINES);
    let [title, processes, _, table, notice, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(process_lines as u16),
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(title_line(picture)), title);
    frame.render_widget(Paragraph::new(process_text(picture, processes)), processes);
    draw_table(frame, picture, table);
    if let Some(text) = picture.notice {
        frame.render_widget(Paragraph::new(fit(text, usize::from(notice.width))), notice);
    }
    frame.render_widget(Paragraph::new(keys_line(picture)), keys);
}

fn title_line(picture: &Picture<'_>) -> Line<'static> {
    let view = picture.view;
    let span = match (view.shown, picture.span_s) {
        (Shown::LastInterval, Some(s)) => format!("last {s:.1} s"),
        (Shown::SinceStart, Some(s)) => format!("since the start, {s:.1} s"),
        (_, None) => "waiting for the first samples".into(),
    };
    let paused = if view.paused_at.is_some() {
        "   PAUSED (p resumes)"
    } else {
        ""
    };
    Line::from(format!(
        "gilsample top   {span}   sorted by {}{paused}",
        view.sort.word()
    ))
}

fn process_text(picture: &Picture<'_>, area: Rect) -> Vec<Line<'static>> {
    let count = picture.processes.len();
    if count == 0 {
        return vec![Line::from("attaching...")];
    }
    let lines = usize::from(area.height).min(count);
    let selected = picture.view.selected.min(count - 1);
    let first = selected.saturating_sub(lines - 1);
    picture.processes[first..first + lines]
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let is_selected = first + i == selected;
            let text = process_words(line, count, first + i);
            let text = fit(
                &format!("{} {text}", if is_selected { ">" } else { " " }),
                usize::from(area.width),
            );
            if is_selected {
                Line::styled(text, Style::new().add_modifier(Modifier::BOLD))
            } else {
                Line::from(text)
            }
        })
        .collect()
}

fn process_words(line: &ProcessLine, count: usize, index: usize) -> String {
    let p = &line.described;
    let mut words = format!("pid {}", p.pid);
    if let Some(rank) = p.rank {
        words += &format!(" rank {rank}");
    }
    if count > 1 {
        words = format!("[{}/{count}] {words}", index + 1);
    }
    if let Some(python) = &p.python {
        words += &format!(" Python {python}");
    }
    words += &match (&line.headline, p.ended) {
        (Some(headline), false) => format!(": {headline}"),
        (Some(headline), true) => format!(" (ended): {headline}"),
        (None, true) => " (ended)".into(),
        (None, false) => ": no samples yet".into(),
    };
    if !p.command_line.is_empty() {
        words += &format!("  {}", p.command_line);
    }
    words
}

/// Widths of the figure columns (WAIT% to P99 MS), and the most the thread, holder and holding
/// columns take before the code column gets the rest.
const FIGURE_WIDTHS: [u16; 4] = [6, 6, 7, 6];
const TEXT_CAPS: [(usize, u16); 3] = [(0, 20), (5, 18), (7, 12)];
/// The code column is not made narrower than this while the others can give way.
const CODE_MIN: u16 = 16;
const CODE: usize = 6;

/// The table's column widths in `width` cells: the figures fixed; the text columns as wide as what
/// they hold, the thread, holder and holding columns up to their caps while the code column needs
/// the room; on a narrow screen those give way, down to their titles' widths, before the code
/// column does.
fn column_widths(width: u16, cells: &[[String; 8]]) -> [u16; 8] {
    let mut desired = [0u16; 8];
    for (i, title) in COLUMNS.iter().enumerate() {
        let longest = cells.iter().map(|row| row[i].chars().count()).max();
        desired[i] = longest.unwrap_or(0).max(title.len()) as u16;
    }
    for (i, &w) in FIGURES.zip(FIGURE_WIDTHS.iter()) {
        desired[i] = w;
    }
    let mut widths = desired;
    for (i, cap) in TEXT_CAPS {
        widths[i] = widths[i].min(cap);
    }
    let spacing = (COLUMNS.len() - 1) as u16;
    let room = |w: &[u16; 8]| {
        let others: u16 = (0..w.len()).filter(|&i| i != CODE).map(|i| w[i]).sum();
        width.saturating_sub(spacing + others)
    };
    let mut left = room(&widths);
    if left >= desired[CODE] {
        // Room to spare: the capped columns get theirs back, then the code column the rest.
        let mut spare = left - desired[CODE];
        for &(i, _) in TEXT_CAPS.iter().rev() {
            let more = (desired[i] - widths[i]).min(spare);
            widths[i] += more;
            spare -= more;
        }
        widths[CODE] = desired[CODE] + spare;
        return widths;
    }
    while left < CODE_MIN {
        // The widest text column above its title's width gives a cell.
        let Some((i, _)) = TEXT_CAPS
            .iter()
            .map(|&(i, _)| (i, widths[i]))
            .filter(|&(i, w)| w > COLUMNS[i].len() as u16)
            .max_by_key(|&(_, w)| w)
        else {
            break;
        };
        widths[i] -= 1;
        left = room(&widths);
    }
    widths[CODE] = left;
    widths
}

fn draw_table(frame: &mut Frame<'_>, picture: &Picture<'_>, area: Rect) {
    let cells: Vec<[String; 8]> = picture.rows.iter().map(ThreadRow::cells).collect();
    let widths = column_widths(area.width, &cells);
    let cell = |i: usize, text: &str| {
        let text = fit(text, usize::from(widths[i]));
        if FIGURES.contains(&i) {
            Cell::from(Line::from(text).right_aligned())
        } else {
            Cell::from(text)
        }
    };
    let header = Row::new(COLUMNS.iter().enumerate().map(|(i, c)| cell(i, c)))
        .style(Style::new().add_modifier(Modifier::REVERSED));
    let visible = usize::from(area.height.saturating_sub(1));
    let rows: Vec<Row<'_>> = cells
        .iter()
        .skip(picture.view.scroll)
        .take(visible)
        .map(|row| Row::new(row.iter().enumerate().map(|(i, c)| cell(i, c))))
        .collect();
    let empty = rows.is_empty();
    let table = Table::new(rows, widths.iter().map(|&w| Constraint::Length(w)))
        .header(header)
        .column_spacing(1);
    frame.render_widget(table, area);
    if empty && area.height > 1 {
        let below = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        let text = if picture.span_s.is_some() {
            "no thread touched the GIL in this span"
        } else {
            "waiting for the first samples"
        };
        frame.render_widget(Paragraph::new(text), below);
    }
}

fn keys_line(picture: &Picture<'_>) -> Line<'static> {
    let view = picture.view;
    let mut keys = vec![
        "q quit".to_string(),
        format!("s sort by {}", view.sort.other().word()),
        match view.shown {
            Shown::LastInterval => "t since start".to_string(),
            Shown::SinceStart => "t last interval".to_string(),
        },
        if view.paused_at.is_some() {
            "p resume".to_string()
        } else {
            "p pause".to_string()
        },
    ];
    if picture.processes.len() > 1 {
        keys.push("<- -> process".into());
    }
    if !picture.rows.is_empty() {
        keys.push("up/down scroll".into());
    }
    Line::styled(keys.join("  "), Style::new().add_modifier(Modifier::BOLD))
}

#[cfg(test)]
#[path = "screen_tests.rs"]
mod tests;
