//! Layouts: the offsets and sizes of the few CPython fields gilsample reads, per version, build flavour
//! and architecture.
//!
//! A layout is data. `FIELD_QUERIES` says which DWARF member paths answer each field; `from_dwarf`
//! asks an interpreter build, and `scripts/generate-layouts.sh` writes the answers to
//! `python-layouts/<version>-<flavour>-<arch>.json`, which are compiled into the binary. Adding a CPython
//! version is a matter of running that script on a build of it.

use std::collections::BTreeMap;
use std::fmt;

use goblin::elf::Elf;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use crate::python::fields::{FIELD_QUERIES, FieldSpec};
use crate::symbols::dwarf::{FieldInfo, FieldQuery, find_fields_parsed};
use crate::symbols::elf::ElfImage;

/// Which kind of build the interpreter is; debug (`Py_DEBUG`) builds have different struct layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavour {
    /// An ordinary release build.
    Default,
    /// A `Py_DEBUG` build.
    Debug,
    /// A free-threaded build (`Py_GIL_DISABLED`, 3.13+).
    FreeThreaded,
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavour::Default => "default",
            Flavour::Debug => "debug",
            Flavour::FreeThreaded => "free-threaded",
        })
    }
}

/// A version's layout, as stored in `python-layouts/`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// `3.11`
    pub version: String,
    /// The build flavour it is for (default, debug or free-threaded).
    pub flavour: Flavour,
    /// The ELF machine it is for, `x86_64`.
    pub arch: String,
    /// The full version of the build the layout was generated from, e.g. `3.11.7`.
    pub generated_from_version: String,
    /// The file it was generated from, and its build-id, so a test can regenerate and compare.
    pub generated_from: String,
    /// The GNU build-id of `generated_from`, where it has one.
    pub build_id: Option<String>,
    /// When `generated_from` is a separate debug file: the binary it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// Each field's offset and size, by its name in `fields.rs` (`gil.locked`).
    pub fields: BTreeMap<String, FieldInfo>,
}

impl Layout {
    /// Reads every field in `FIELD_QUERIES` from the DWARF of `image`.
    pub fn from_dwarf(
        image: &ElfImage,
        version: &str,
        full_version: &str,
        flavour: Flavour,
        arch: &str,
    ) -> Result<Layout> {
        Layout::from_dwarf_parsed(image, &image.parse()?, version, full_version, flavour, arch)
    }

    /// `from_dwarf` for an image already parsed as `elf` (attach parses the interpreter once).
    pub fn from_dwarf_parsed(
        image: &ElfImage,
        elf: &Elf<'_>,
        version: &str,
        full_version: &str,
        flavour: Flavour,
        arch: &str,
    ) -> Result<Layout> {
        let queries: Vec<(usize, FieldQuery<'_>)> = FIELD_QUERIES
            .iter()
            .enumerate()
            .flat_map(|(i, spec)| {
                spec.paths.iter().map(move |path| {
                    (
                        i,
                        FieldQuery {
                            root: spec.root,
                            path,
                        },
                    )
                })
            })
            .collect();
        let plain: Vec<FieldQuery<'_>> = queries.iter().map(|(_, q)| *q).collect();
        let answers = find_fields_parsed(image, elf, &plain)?;
        let mut fields = BTreeMap::new();
        for ((spec_index, _), answer) in queries.iter().zip(answers) {
            let name = FIELD_QUERIES[*spec_index].name;
            if let Some(info) = answer {
                fields.entry(name.to_string()).or_insert(info);
            }
        }
        let layout = Layout {
            version: version.to_string(),
            flavour,
            arch: arch.to_string(),
            generated_from_version: full_version.to_string(),
            generated_from: image.path.display().to_string(),
            build_id: crate::symbols::elf::build_id(elf, image.bytes()),
            binary: None,
            fields,
        };
        layout.check().map_err(|why| Error::Binary {
            path: image.path.clone(),
            why,
        })?;
        Ok(layout)
    }

    /// Checks what a reader relies on: required fields present, every field inside its struct, a GIL
    /// reachable one way or the other, and pointer-sized pointers.
    pub fn check(&self) -> std::result::Result<(), String> {
        for spec in FIELD_QUERIES.iter().filter(|s| s.required) {
            if !self.fields.contains_key(spec.name) {
                return Err(format!("layout {} lacks field {}", self.key(), spec.name));
            }
        }
        let gil_size = self.fields["gil"].size;
        for (name, info) in self.fields.iter().filter(|(n, _)| n.starts_with("gil.")) {
            if info
                .offset
                .checked_add(info.size)
                .is_none_or(|end| end > gil_size)
            {
                return Err(format!(
                    "field {name} lies outside the {gil_size}-byte GIL struct"
                ));
            }
        }
        let runtime_gil = self.fields.get("runtime.ceval.gil");
        let interp_gil = self.fields.get("interp.ceval.gil");
        match (runtime_gil, interp_gil) {
            (Some(g), _) if g.size == gil_size => {}
            (None, Some(p)) if p.size == 8 => {}
            _ => return Err(
                "neither _PyRuntime.ceval.gil (embedded) nor interp->ceval.gil (pointer) is usable"
                    .into(),
            ),
        }
        for name in [
            "runtime.interpreters.head",
            "interp.next",
            "interp.threads.head",
            "tstate.next",
            "tstate.interp",
        ] {
            if self.fields[name].size != 8 {
                return Err(format!("field {name} is not a 64-bit pointer"));
            }
        }
        if self
            .fields
            .values()
            .any(|f| f.offset > 1 << 20 || f.size > 1 << 16)
        {
            return Err("a field offset or size is implausibly large".into());
        }
        Ok(())
    }

    /// `3.11-default-x86_64`, the file name under `python-layouts/` without `.json`.
    pub fn key(&self) -> String {
        layout_key(&self.version, self.flavour, &self.arch)
    }

    /// Where field `name` lies, if this build has it.
    pub fn field(&self, name: &str) -> Option<FieldInfo> {
        self.fields.get(name).copied()
    }

    /// A field `check` guaranteed to be there.
    pub fn required(&self, name: &str) -> FieldInfo {
        self.fields[name]
    }

    /// The layout as a `python-layouts/` file: pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a layout always serializes") + "\n"
    }
}

/// The name of the layout file for a version, flavour and architecture, `3.11-default-x86_64`,
/// without `.json`.
pub fn layout_key(version: &str, flavour: Flavour, arch: &str) -> String {
    format!("{version}-{flavour}-{arch}")
}

/// The layouts compiled in from `python-layouts/` (see build.rs): file name and contents.
pub const SHIPPED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/shipped_layouts.rs"));

/// The shipped layout for a version, flavour and architecture.
pub fn find_shipped(version: &str, flavour: Flavour, arch: &str) -> Result<Option<Layout>> {
    let wanted = format!("{}.json", layout_key(version, flavour, arch));
    let Some((name, text)) = SHIPPED.iter().find(|(name, _)| *name == wanted) else {
        return Ok(None);
    };
    let layout: Layout = serde_json::from_str(text).map_err(|e| Error::Binary {
        path: format!("python-layouts/{name}").into(),
        why: format!("corrupt layout file: {e}"),
    })?;
    layout.check().map_err(|why| Error::Binary {
        path: format!("python-layouts/{name}").into(),
        why,
    })?;
    Ok(Some(layout))
}

/// The keys of every shipped layout, for error messages.
pub fn shipped_keys() -> Vec<String> {
    SHIPPED
        .iter()
        .map(|(name, _)| name.trim_end_matches(".json").to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_layout_parses_and_checks() {
        assert!(!SHIPPED.is_empty(), "no layouts were compiled in");
        for (name, text) in SHIPPED {
            let layout: Layout =
                serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            layout.check().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                format!("{}.json", layout.key()),
                *name,
                "file name must match contents"
            );
        }
    }

    #[test]
    fn aarch64_layouts_carry_glibcs_larger_mutex() {
        // pthread_mutex_t is 40 bytes on x86_64 and 48 on aarch64; the GIL struct's tail moves with it.
        for (arch, mutex, gil) in [("x86_64", 40, 208), ("aarch64", 48, 224)] {
            let layout = find_shipped("3.14", Flavour::Default, arch)
                .unwrap()
                .expect("shipped 3.14 layout");
            assert_eq!(layout.required("gil.mutex").size, mutex, "{arch}");
            assert_eq!(layout.required("gil").size, gil, "{arch}");
        }
    }

    #[test]
    fn check_rejects_a_field_outside_the_gil() {
        let (_, text) = SHIPPED[0];
        let mut layout: Layout = serde_json::from_str(text).unwrap();
        let gil = layout.fields["gil"];
        layout
            .fields
            .insert("gil.locked".into(), FieldInfo::at(gil.size, 4));
        assert!(layout.check().unwrap_err().contains("gil.locked"));
    }
}
