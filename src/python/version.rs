//! CPython versions: decoded from `Py_Version` (3.11+) or from the binary's file name.

use std::fmt;
use std::path::Path;

/// Oldest and newest minor versions gilsample has layouts or debug-offset support for.
pub const OLDEST_SUPPORTED: (u32, u32) = (3, 7);

/// A CPython version: major, minor and, where known, micro.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PyVersion {
    /// `3` of 3.12.
    pub major: u32,
    /// `12` of 3.12.
    pub minor: u32,
    /// `None` when only the file name told us the version.
    pub micro: Option<u32>,
}

impl PyVersion {
    /// Decodes `PY_VERSION_HEX` (e.g. 0x030b07f0 = 3.11.7 final).
    pub fn from_hex(hex: u64) -> PyVersion {
        PyVersion {
            major: ((hex >> 24) & 0xff) as u32,
            minor: ((hex >> 16) & 0xff) as u32,
            micro: Some(((hex >> 8) & 0xff) as u32),
        }
    }

    /// Reads `3.X` out of names such as `libpython3.8.so.1.0`, `libpython3.7m.so`, `python3.11`, `python3.13d`.
    pub fn from_file_name(path: &Path) -> Option<PyVersion> {
        let name = path.file_name()?.to_str()?;
        let rest = &name[name.find("python")? + "python".len()..];
        let mut parts = rest.splitn(2, '.');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor_digits: String = parts
            .next()?
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        Some(PyVersion {
            major,
            minor: minor_digits.parse().ok()?,
            micro: None,
        })
    }

    /// With the micro version found in `text` (a binary's read-only data) when the version came
    /// from the file name only. Before 3.11 there is no `Py_Version`, but `PY_VERSION` ("3.8.18")
    /// is in the binary as a string, possibly as the tail of another one the linker merged it into
    /// (".../versions/3.8.18"): the micro is taken when every `3.8.N` string ending there agrees.
    pub fn with_micro_from(self, text: &[u8]) -> PyVersion {
        if self.micro.is_some() {
            return self;
        }
        let prefix = format!("{}.{}.", self.major, self.minor);
        let mut found: Option<u32> = None;
        for at in memchr::memmem::find_iter(text, prefix.as_bytes()) {
            // Not the tail of a longer number ("13.8.1"), nor of a longer version ("2.3.8.1").
            if at > 0 && (text[at - 1].is_ascii_digit() || text[at - 1] == b'.') {
                continue;
            }
            let rest = &text[at + prefix.len()..];
            let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            let Ok(micro) = std::str::from_utf8(&rest[..digits])
                .unwrap_or("")
                .parse::<u32>()
            else {
                continue;
            };
            // PY_VERSION ends the string: a release suffix (a1, b2, rc1) and a "+" may follow.
            let suffix = rest[digits..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || **b == b'+')
                .count();
            if rest.get(digits + suffix) != Some(&0) {
                continue;
            }
            match found {
                None => found = Some(micro),
                Some(other) if other != micro => return self,
                Some(_) => {}
            }
        }
        PyVersion {
            micro: found,
            ..self
        }
    }

    /// `3.11`, the key layouts are stored under.
    pub fn minor_key(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }
}

impl fmt::Display for PyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.micro {
            Some(micro) => write!(f, "{}.{}.{}", self.major, self.minor, micro),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_hex_version() {
        assert_eq!(PyVersion::from_hex(0x030b07f0).to_string(), "3.11.7");
        assert_eq!(PyVersion::from_hex(0x030f00a1).minor_key(), "3.15");
    }

    #[test]
    fn the_micro_version_is_read_from_the_binarys_strings_when_they_agree() {
        let named = PyVersion::from_file_name(Path::new("libpython3.8.so.1.0")).unwrap();
        let with = |text: &[u8]| named.with_micro_from(text).to_string();
        assert_eq!(with(b"x\x003.8.18\x00y"), "3.8.18");
        // The linker's merged tail of a path, a release suffix, and unrelated numbers around.
        assert_eq!(
            with(b"/root/.pyenv/versions/3.8.18\x00GCC 13.8.1\x00"),
            "3.8.18"
        );
        assert_eq!(with(b"\x003.8.0rc1+\x00"), "3.8.0");
        // Disagreeing strings, or none: the version stays without its micro.
        assert_eq!(with(b"\x003.8.18\x003.8.17\x00"), "3.8");
        assert_eq!(with(b"3.8.18 (default)\x00"), "3.8");
        assert_eq!(with(b""), "3.8");
        let exact = PyVersion::from_hex(0x030b07f0);
        assert_eq!(
            exact.with_micro_from(b"\x003.11.2\x00").to_string(),
            "3.11.7"
        );
    }

    #[test]
    fn reads_version_from_names() {
        let v = |s: &str| PyVersion::from_file_name(Path::new(s)).map(|v| v.to_string());
        assert_eq!(v("/x/lib/libpython3.8.so.1.0").as_deref(), Some("3.8"));
        assert_eq!(v("libpython3.7m.so").as_deref(), Some("3.7"));
        assert_eq!(v("/usr/bin/python3.13d").as_deref(), Some("3.13"));
        assert_eq!(v("/usr/lib/libpython2.7.so.1.0").as_deref(), Some("2.7"));
        assert_eq!(v("/usr/bin/bash"), None);
    }
}
