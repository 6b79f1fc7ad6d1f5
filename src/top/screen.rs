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
    let mut words = format!("pid {} rank {}", p.pid, p.rank);
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

/// The table's column widths in `width` cells: the figures fixed, the text columns sharing the rest.
fn column_widths(width: u16) -> Vec<u16> {
    let constraints = [
        Constraint::Fill(3),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Fill(3),
        Constraint::Fill(4),
        Constraint::Fill(3),
    ];
    Layout::horizontal(constraints)
        .spacing(1)
        .split(Rect::new(0, 0, width, 1))
        .iter()
        .map(|r| r.width)
        .collect()
}

fn draw_table(frame: &mut Frame<'_>, picture: &Picture<'_>, area: Rect) {
    let widths = column_widths(area.width);
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
    let rows: Vec<Row<'_>> = picture
        .rows
        .iter()
        .skip(picture.view.scroll)
        .take(visible)
        .map(|row| Row::new(row.cells().iter().enumerate().map(|(i, c)| cell(i, c))))
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
