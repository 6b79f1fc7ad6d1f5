//! What the full-screen view shows and how its keys change it: the sort, the span (the last interval
//! or since the start), pausing, which process, how far the threads are scrolled. Pure: keys in,
//! state and what to do out.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::top::table::SortBy;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The tables are of the last interval.
    LastInterval,
    /// The tables are of the whole recording.
    SinceStart,
}

#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub sort: SortBy,
    pub shown: Shown,
    /// The moment the view was paused at (trace clock): the tables stay as of then.
    pub paused_at: Option<i128>,
    /// Index of the process shown, among the session's processes by pid.
    pub selected: usize,
    /// Threads scrolled past at the top of the table.
    pub scroll: usize,
}

/// What a key asks of the view's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Leave the view.
    Quit,
    /// The tables must be computed again (another sort, span or process).
    Recompute,
    /// Only the screen changes (scrolling).
    Redraw,
    /// Pause at the latest moment the recording knows.
    Pause,
    /// Nothing to do.
    Nothing,
}

impl Default for View {
    fn default() -> View {
        View {
            sort: SortBy::Wait,
            shown: Shown::LastInterval,
            paused_at: None,
            selected: 0,
            scroll: 0,
        }
    }
}

/// Threads one Page Up/Down moves.
const PAGE: usize = 10;

impl View {
    /// Handles one key; `processes` is how many there are.
    pub fn on_key(&mut self, key: KeyEvent, processes: usize) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Nothing;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => Action::Quit,
            KeyCode::Char('s') => {
                self.sort = self.sort.other();
                Action::Recompute
            }
            KeyCode::Char('w') => self.sort_by(SortBy::Wait),
            KeyCode::Char('h') => self.sort_by(SortBy::Hold),
            KeyCode::Char('t') => {
                self.shown = match self.shown {
                    Shown::LastInterval => Shown::SinceStart,
                    Shown::SinceStart => Shown::LastInterval,
                };
                Action::Recompute
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => {
                if self.paused_at.take().is_some() {
                    Action::Recompute
                } else {
                    Action::Pause
                }
            }
            KeyCode::Right | KeyCode::Tab if processes > 1 => {
                self.select((self.selected + 1) % processes)
            }
            KeyCode::Left | KeyCode::BackTab if processes > 1 => {
                self.select((self.selected + processes - 1) % processes)
            }
            KeyCode::Down => self.scroll_to(self.scroll + 1),
            KeyCode::Up => self.scroll_to(self.scroll.saturating_sub(1)),
            KeyCode::PageDown => self.scroll_to(self.scroll + PAGE),
            KeyCode::PageUp => self.scroll_to(self.scroll.saturating_sub(PAGE)),
            KeyCode::Home => self.scroll_to(0),
            _ => Action::Nothing,
        }
    }

    fn sort_by(&mut self, sort: SortBy) -> Action {
        self.sort = sort;
        Action::Recompute
    }

    fn select(&mut self, index: usize) -> Action {
        self.selected = index;
        self.scroll = 0;
        Action::Recompute
    }

    fn scroll_to(&mut self, scroll: usize) -> Action {
        self.scroll = scroll;
        Action::Redraw
    }

    /// Keeps the selection and the scroll inside what there is.
    pub fn clamp(&mut self, processes: usize, rows: usize, visible_rows: usize) {
        self.selected = self.selected.min(processes.saturating_sub(1));
        self.scroll = self.scroll.min(rows.saturating_sub(visible_rows));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_quit_sort_toggle_and_pause() {
        let mut view = View::default();
        assert_eq!(view.on_key(key(KeyCode::Char('q')), 1), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(view.on_key(ctrl_c, 1), Action::Quit);
        assert_eq!(view.on_key(key(KeyCode::Char('c')), 1), Action::Nothing);
        assert_eq!(view.on_key(key(KeyCode::Char('s')), 1), Action::Recompute);
        assert_eq!(view.sort, SortBy::Hold);
        view.on_key(key(KeyCode::Char('w')), 1);
        assert_eq!(view.sort, SortBy::Wait);
        view.on_key(key(KeyCode::Char('t')), 1);
        assert_eq!(view.shown, Shown::SinceStart);
        assert_eq!(view.on_key(key(KeyCode::Char('p')), 1), Action::Pause);
        view.paused_at = Some(5);
        assert_eq!(view.on_key(key(KeyCode::Char('p')), 1), Action::Recompute);
        assert_eq!(view.paused_at, None);
    }

    #[test]
    fn arrows_go_round_the_processes_when_there_are_several() {
        let mut view = View::default();
        assert_eq!(view.on_key(key(KeyCode::Right), 1), Action::Nothing);
        view.scroll = 4;
        assert_eq!(view.on_key(key(KeyCode::Right), 3), Action::Recompute);
        assert_eq!((view.selected, view.scroll), (1, 0));
        view.on_key(key(KeyCode::Left), 3);
        view.on_key(key(KeyCode::Left), 3);
        assert_eq!(view.selected, 2);
        view.on_key(key(KeyCode::Right), 3);
        assert_eq!(view.selected, 0);
    }

    #[test]
    fn scrolling_stays_inside_the_rows() {
        let mut view = View::default();
        view.on_key(key(KeyCode::PageDown), 1);
        view.on_key(key(KeyCode::Down), 1);
        assert_eq!(view.scroll, PAGE + 1);
        view.clamp(1, 15, 10);
        assert_eq!(view.scroll, 5);
        view.selected = 3;
        view.clamp(2, 15, 20);
        assert_eq!((view.selected, view.scroll), (1, 0));
    }
}
