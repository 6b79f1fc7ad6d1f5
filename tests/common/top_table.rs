//! Reading `gilsample top`'s tables as a test sees them, on the screen or printed: a thread's row
//! starts with its name, then wait %, hold % and waits per second.

/// The line of `screen` that starts with `name` (a thread's row).
pub fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    screen
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
}

/// A row's figures: wait %, hold %, waits per second.
pub fn figures(row: &str) -> Option<[f64; 3]> {
    let words: Vec<&str> = row.split_whitespace().collect();
    let number = |i: usize| words.get(i)?.parse::<f64>().ok();
    Some([number(1)?, number(2)?, number(3)?])
}
