//! CPython versions: decoded from `Py_Version` (3.11+) or from the binary's file name.

use std::fmt;
use std::path::Path;

/// Oldest and newest minor versions gilsample has layouts or debug-offset support for.
pub const OLDEST_SUPPORTED: (u32, u32) = (3, 7);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PyVersion {
    pub major: u32,
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
    fn reads_version_from_names() {
        let v = |s: &str| PyVersion::from_file_name(Path::new(s)).map(|v| v.to_string());
        assert_eq!(v("/x/lib/libpython3.8.so.1.0").as_deref(), Some("3.8"));
        assert_eq!(v("libpython3.7m.so").as_deref(), Some("3.7"));
        assert_eq!(v("/usr/bin/python3.13d").as_deref(), Some("3.13"));
        assert_eq!(v("/usr/lib/libpython2.7.so.1.0").as_deref(), Some("2.7"));
        assert_eq!(v("/usr/bin/bash"), None);
    }
}
