//! Provider translation, golden: one table of snapshot cases for every provider, one harness
//! ([`golden_table`]) and one naming scheme, `<provider>__<case>` (`all__…` for a case that
//! covers every provider at once), so `snapshots/it__golden__<provider>__<case>.snap`.
//!
//! Each submodule contributes its rows (`cases`), each row building the value to snapshot and
//! asserting what must hold of it on the way, next to the tests of that area that are not
//! snapshots (fixture parsing, properties, detection, declarations):
//!
//! - [`agb`]: Anthropic, Gemini, Bedrock;
//! - [`openai_family`]: OpenAI Chat, OpenAI Responses, Mistral, Cohere, Ollama;
//! - [`files`]: results that carry files, every provider;
//! - [`declare`]: tool declarations, every provider.

mod agb;
mod declare;
mod files;
mod openai_family;

use std::collections::BTreeSet;
use std::error::Error;
use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

type Row = Box<dyn FnOnce() -> Result<Value, Box<dyn Error>>>;

/// The golden table: `(<provider>__<case>, how to build the value)`, in insertion order.
#[derive(Default)]
pub(super) struct Table {
    rows: Vec<(String, Row)>,
}

impl Table {
    /// Adds the case `case` of `provider` (a [`toolwire::provider::Provider`], or `"all"`).
    pub(super) fn add<R: Serialize>(
        &mut self,
        provider: impl Display,
        case: &str,
        build: impl FnOnce() -> Result<R, Box<dyn Error>> + 'static,
    ) {
        let name = format!("{provider}__{case}");
        assert!(self.rows.iter().all(|(n, _)| *n != name), "two rows named {name}");
        self.rows
            .push((name, Box::new(move || Ok(serde_json::to_value(build()?)?))));
    }
}

/// Every row of every area.
fn table() -> Table {
    let mut t = Table::default();
    agb::cases(&mut t);
    openai_family::cases(&mut t);
    files::cases(&mut t);
    declare::cases(&mut t);
    t
}

/// Snapshots every row; a failing row does not hide the others (all are listed at the end).
#[test]
fn golden_table() {
    let mut failed = Vec::new();
    let mut names = BTreeSet::new();
    for (name, build) in table().rows {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let value = build().unwrap_or_else(|e| panic!("{name}: {e}"));
            insta::assert_json_snapshot!(name.as_str(), value);
        }));
        if outcome.is_err() {
            failed.push(name.clone());
        }
        names.insert(name);
    }
    assert!(failed.is_empty(), "golden rows failed: {failed:?}");

    // Every snapshot file belongs to a row: a renamed or removed row must not leave its old
    // snapshot behind, unchecked.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/golden/snapshots");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_prefix("it__golden__")?.strip_suffix(".snap").map(str::to_owned))
        .collect();
    assert_eq!(files, names, "snapshot files in {} vs rows", dir.display());
}
