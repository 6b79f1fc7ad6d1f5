//! Keeps every function in src/ short enough to read in one screenful or two.
//!
//! A rough scanner, not a parser: comments, string literals and char literals are blanked out
//! first so their braces cannot mislead the brace matching, then each `fn` with a body is measured
//! from its `fn` line to its closing brace. Items marked `#[cfg(test)]` are skipped whole, since
//! tests may be as long as their tables need.

use std::fs;
use std::path::{Path, PathBuf};

const MOST_LINES: usize = 120;

/// What the scan of one file finds.
#[derive(Debug, Default, PartialEq)]
struct Scan {
    functions: Vec<FunctionLength>,
    /// Files of modules declared `#[cfg(test)] mod name;`, as written: `name.rs`, or the
    /// `#[path]` given, relative to the declaring file's module directory.
    test_only_files: Vec<String>,
}

#[derive(Debug, PartialEq)]
struct FunctionLength {
    name: String,
    first_line: usize,
    lines: usize,
}

/// The source with every comment, string literal and char literal replaced by spaces; newlines
/// are kept so that line numbers still match the file.
fn blank_out_literals_and_comments(source: &str) -> Vec<u8> {
    let bytes = source.as_bytes();
    let mut code = bytes.to_vec();
    let blank = |code: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut code[from..to.min(bytes.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |n| at + n);
            blank(&mut code, at, end);
            at = end;
        } else if rest.starts_with(b"/*") {
            let end = end_of_block_comment(bytes, at);
            blank(&mut code, at, end);
            at = end;
        } else if let Some(end) = end_of_raw_string(bytes, at) {
            blank(&mut code, at, end);
            at = end;
        } else if rest[0] == b'"' {
            let end = end_of_quoted(bytes, at, b'"');
            blank(&mut code, at, end);
            at = end;
        } else if rest[0] == b'\'' {
            match end_of_char_literal(bytes, at) {
                Some(end) => {
                    blank(&mut code, at, end);
                    at = end;
                }
                // A lifetime such as 'a: nothing to blank.
                None => at += 1,
            }
        } else {
            at += 1;
        }
    }
    code
}

fn end_of_block_comment(bytes: &[u8], start: usize) -> usize {
    let mut depth = 0;
    let mut at = start;
    while at < bytes.len() {
        if bytes[at..].starts_with(b"/*") {
            depth += 1;
            at += 2;
        } else if bytes[at..].starts_with(b"*/") {
            depth -= 1;
            at += 2;
            if depth == 0 {
                return at;
            }
        } else {
            at += 1;
        }
    }
    bytes.len()
}

/// Where a raw string such as `r#"..."#` (or `br"..."`) that starts at `start` ends, if one does.
fn end_of_raw_string(bytes: &[u8], start: usize) -> Option<usize> {
    let follows_identifier = start > 0 && is_identifier_byte(bytes[start - 1]);
    if follows_identifier || bytes[start] != b'r' {
        return None;
    }
    let hashes = bytes[start + 1..]
        .iter()
        .take_while(|&&b| b == b'#')
        .count();
    let quote = start + 1 + hashes;
    if bytes.get(quote) != Some(&b'"') {
        return None;
    }
    let mut closing = vec![b'"'];
    closing.extend(std::iter::repeat_n(b'#', hashes));
    let body = quote + 1;
    let end = bytes[body..]
        .windows(closing.len())
        .position(|window| window == closing.as_slice())
        .map_or(bytes.len(), |n| body + n + closing.len());
    Some(end)
}

fn end_of_quoted(bytes: &[u8], start: usize, quote: u8) -> usize {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            byte if byte == quote => return at + 1,
            _ => at += 1,
        }
    }
    bytes.len()
}

/// Where a char literal starting at `start` ends, or None where the quote opens a lifetime.
fn end_of_char_literal(bytes: &[u8], start: usize) -> Option<usize> {
    if bytes.get(start + 1) == Some(&b'\\') {
        return Some(end_of_quoted(bytes, start, b'\''));
    }
    // One character, possibly several bytes of UTF-8, then the closing quote.
    let width = match bytes.get(start + 1)? {
        byte if *byte < 0x80 => 1,
        byte if *byte >= 0xF0 => 4,
        byte if *byte >= 0xE0 => 3,
        _ => 2,
    };
    let closing = start + 1 + width;
    (bytes.get(closing) == Some(&b'\'')).then_some(closing + 1)
}

fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

fn line_of(code: &[u8], at: usize) -> usize {
    1 + code[..at].iter().filter(|&&b| b == b'\n').count()
}

/// The index just past the brace that closes the one at `open`.
fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (at, &byte) in code.iter().enumerate().skip(open) {
        match byte {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The first `{` or `;` from `from` on: the body of an item, or the end of a bodiless one.
fn body_or_end(code: &[u8], from: usize) -> Option<(usize, u8)> {
    code[from..]
        .iter()
        .position(|&b| b == b'{' || b == b';')
        .map(|n| (from + n, code[from + n]))
}

fn word_at(code: &[u8], at: usize, word: &[u8]) -> bool {
    code[at..].starts_with(word)
        && (at == 0 || !is_identifier_byte(code[at - 1]))
        && code
            .get(at + word.len())
            .is_none_or(|&b| !is_identifier_byte(b))
}

/// The file a bodiless `#[cfg(test)] ... mod name;` item names, from the item's original text.
fn test_only_file(item: &str) -> Option<String> {
    if let Some(after) = item.split("#[path = \"").nth(1) {
        return after.split('"').next().map(str::to_string);
    }
    let name = item.trim_end_matches(';').split_whitespace().last()?;
    item.contains("mod ").then(|| format!("{name}.rs"))
}

/// Every function with a body in `source`, outside items marked `#[cfg(test)]`.
fn scan(source: &str) -> Scan {
    let code = blank_out_literals_and_comments(source);
    let mut found = Scan::default();
    let mut at = 0;
    while at < code.len() {
        if code[at..].starts_with(b"#[cfg(test)]") {
            at = match body_or_end(&code, at) {
                Some((open, b'{')) => matching_brace(&code, open),
                Some((end, _)) => {
                    found
                        .test_only_files
                        .extend(test_only_file(&source[at..=end]));
                    end + 1
                }
                None => code.len(),
            };
            continue;
        }
        if word_at(&code, at, b"fn") {
            let name_start = at + 2;
            let name: String = code[name_start..]
                .iter()
                .skip_while(|b| b.is_ascii_whitespace())
                .take_while(|&&b| is_identifier_byte(b))
                .map(|&b| b as char)
                .collect();
            if !name.is_empty()
                && let Some((open, b'{')) = body_or_end(&code, name_start)
            {
                let close = matching_brace(&code, open);
                let first_line = line_of(&code, at);
                found.functions.push(FunctionLength {
                    name,
                    first_line,
                    lines: line_of(&code, close - 1) - first_line + 1,
                });
            }
        }
        at += 1;
    }
    found
}

fn rust_files_under(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("read a directory entry").path();
        if path.is_dir() {
            rust_files_under(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// Where the modules that `file` declares live: beside it for mod.rs, lib.rs and main.rs, else
/// in the directory named after it.
fn module_directory(file: &Path) -> PathBuf {
    let dir = file.parent().expect("a file has a directory");
    match file.file_stem().and_then(|stem| stem.to_str()) {
        Some("mod" | "lib" | "main") | None => dir.to_path_buf(),
        Some(stem) => dir.join(stem),
    }
}

#[test]
fn no_function_in_src_is_over_120_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files_under(&src, &mut files);
    files.sort();
    assert!(
        files.len() > 10,
        "found only {} files under src/",
        files.len()
    );
    let scans: Vec<(&PathBuf, Scan)> = files
        .iter()
        .map(|file| {
            (
                file,
                scan(&fs::read_to_string(file).expect("read a source file")),
            )
        })
        .collect();
    let test_only: Vec<PathBuf> = scans
        .iter()
        .flat_map(|(file, scan)| {
            let module_dir = module_directory(file);
            scan.test_only_files
                .iter()
                .map(move |name| module_dir.join(name))
        })
        .collect();
    let mut functions_seen = 0;
    let mut too_long = Vec::new();
    for (file, scan) in scans {
        if test_only.contains(file) {
            continue;
        }
        for function in scan.functions {
            functions_seen += 1;
            if function.lines > MOST_LINES {
                too_long.push(format!(
                    "{}:{} fn {} is {} lines",
                    file.strip_prefix(&src).unwrap_or(file).display(),
                    function.first_line,
                    function.name,
                    function.lines
                ));
            }
        }
    }
    assert!(
        functions_seen > 100,
        "found only {functions_seen} functions"
    );
    assert!(
        too_long.is_empty(),
        "functions over {MOST_LINES} lines:\n{}",
        too_long.join("\n")
    );
}

#[test]
fn the_scanner_measures_functions_and_skips_tests_literals_and_comments() {
    let source = r##"
fn three_lines() {
    let x = 1;
}
// fn in_a_comment() {
/* fn in_a_block /* nested */ comment() { */
fn with_literals<'a>(s: &'a str) -> char {
    let _ = "}} fn in_a_string() {";
    let _ = r#"}" fn in_a_raw_string() {"#;
    let _ = '}';
    let _ = '\'';
    '{'
}
trait Bodiless {
    fn declared_only(&self);
}
#[cfg(test)]
mod tests {
    fn skipped() {}
}
#[cfg(test)]
#[path = "beside_tests.rs"]
mod beside;
#[cfg(test)]
mod tests;
fn last() {}
"##;
    let found = scan(source);
    let lengths: Vec<(&str, usize, usize)> = found
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.first_line, f.lines))
        .collect();
    assert_eq!(
        lengths,
        vec![
            ("three_lines", 2, 3),
            ("with_literals", 7, 7),
            ("last", 26, 1)
        ]
    );
    assert_eq!(found.test_only_files, vec!["beside_tests.rs", "tests.rs"]);
}
