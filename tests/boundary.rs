//! The wire/domain boundary (docs/ARCHITECTURE.md, "Wire, domain and persisted types"):
//! `model` does not depend on `proto`, and in the router and the node the generated wire types
//! (prost messages, tonic clients and servers) are named only by the modules that sit on a
//! wire. Everywhere else a file may use `sextant_proto::convert`, whose functions take and
//! return domain types and bytes. Read from the source tree, so it needs no build of its own.

use std::path::{Path, PathBuf};

/// The modules that may name `sextant_proto`'s wire types, and why.
const PROTO_EDGES: &[(&str, &str)] = &[
    ("node/src/service.rs", "the Storage and Raft gRPC handlers"),
    ("node/src/host.rs", "the gRPC server's wiring and the probe of peers at start"),
    ("node/src/network.rs", "the Raft RPC client"),
    ("node/src/meta_client.rs", "the node's calls to meta's leader"),
    ("node/src/persist/", "persisted messages to and from domain and openraft types"),
    ("router/src/cluster/", "the router's RPC client"),
];

/// OTLP's wire types are the input of the OTLP endpoints and go no further.
const OTLP_EDGE: &str = "router/src/ingest/otlp/";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of `source` without `//` comments (doc comments included), line by line.
fn code_lines(source: &str) -> impl Iterator<Item = (usize, &str)> {
    source.lines().enumerate().map(|(i, line)| (i + 1, line.find("//").map_or(line, |at| &line[..at])))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether a path after `sextant_proto::` stays inside a module that names no wire type:
/// `convert`, or the TLS setup of the public (`tls`) and internal (`internal_tls`) ports.
fn names_no_wire_type(path: &str) -> bool {
    ["convert", "tls", "internal_tls"]
        .iter()
        .any(|module| path.strip_prefix(module).is_some_and(|rest| !rest.starts_with(is_ident)))
}

/// Lines of `source` naming something of crate `krate` other than what `allowed` accepts
/// (given the path after `krate::`). A `use` list is followed across lines.
fn violations(source: &str, krate: &str, allowed: impl Fn(&str) -> bool) -> Vec<(usize, String)> {
    let code: Vec<(usize, &str)> = code_lines(source).collect();
    let mut found = Vec::new();
    for (index, &(number, line)) in code.iter().enumerate() {
        for (at, _) in line.match_indices(krate) {
            if line[..at].ends_with(is_ident) || line[at + krate.len()..].starts_with(is_ident) {
                continue;
            }
            let rest = line[at + krate.len()..].trim_start();
            let ok = match rest.strip_prefix("::") {
                Some(list) if list.trim_start().starts_with('{') => {
                    let mut text: String = list.trim_start().to_owned();
                    for (_, more) in &code[index + 1..] {
                        text.push_str(more);
                    }
                    use_list(&text).iter().all(|item| allowed(item))
                }
                Some(path) => allowed(path.trim_start()),
                None => false,
            };
            if !ok {
                found.push((number, line.trim().to_owned()));
            }
        }
    }
    found
}

/// The items of the `use` list `text` opens (`{a, b::{c, d}}` gives `a` and `b::{c, d}`).
fn use_list(text: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut depth = 0;
    for c in text.chars() {
        match c {
            '{' if depth == 0 => depth = 1,
            '{' => {
                depth += 1;
                items.last_mut().unwrap().push(c);
            }
            '}' if depth == 1 => break,
            '}' => {
                depth -= 1;
                items.last_mut().unwrap().push(c);
            }
            ',' if depth == 1 => items.push(String::new()),
            _ => items.last_mut().unwrap().push(c),
        }
    }
    items.into_iter().map(|item| item.trim().to_owned()).filter(|item| !item.is_empty()).collect()
}

fn report(found: &[(String, usize, String)]) -> String {
    found.iter().map(|(file, line, text)| format!("  {file}:{line}: {text}\n")).collect()
}

fn checked_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in ["router/src", "node/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(root()).unwrap().to_string_lossy().replace('\\', "/");
            (relative, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

#[test]
fn wire_types_are_named_only_in_the_edge_modules() {
    let mut found = Vec::new();
    for (file, source) in checked_files() {
        if PROTO_EDGES.iter().any(|(edge, _)| file.starts_with(edge)) {
            continue;
        }
        for (line, text) in violations(&source, "sextant_proto", names_no_wire_type) {
            found.push((file.clone(), line, text));
        }
    }
    assert!(
        found.is_empty(),
        "wire types outside the edge modules (call a typed function of an edge, or convert \
         through sextant_proto::convert):\n{}",
        report(&found)
    );
}

#[test]
fn otlp_wire_types_stay_in_the_otlp_module() {
    let mut found = Vec::new();
    for (file, source) in checked_files() {
        if file.starts_with(OTLP_EDGE) {
            continue;
        }
        for (line, text) in violations(&source, "opentelemetry_proto", |_| false) {
            found.push((file.clone(), line, text));
        }
    }
    assert!(found.is_empty(), "OTLP wire types outside {OTLP_EDGE}:\n{}", report(&found));
}

#[test]
fn every_edge_module_exists() {
    for (edge, _) in PROTO_EDGES.iter().chain(&[(OTLP_EDGE, "")]) {
        assert!(root().join(edge).exists(), "{edge} is listed as an edge module but does not exist");
    }
}

#[test]
fn model_does_not_depend_on_proto() {
    let manifest = std::fs::read_to_string(root().join("model/Cargo.toml")).unwrap();
    let named: Vec<&str> = code_lines(&manifest)
        .map(|(_, line)| line.find('#').map_or(line, |at| &line[..at]))
        .filter(|line| line.contains("sextant-proto") || line.contains("sextant_proto"))
        .collect();
    assert!(named.is_empty(), "model/Cargo.toml depends on proto: {named:?}");

    let mut files = Vec::new();
    rust_files(&root().join("model/src"), &mut files);
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let found = violations(&source, "sextant_proto", |_| false);
        assert!(found.is_empty(), "{} names sextant_proto: {found:?}", path.display());
    }
}

#[test]
fn the_check_flags_wire_types_and_passes_conversions() {
    let flagged = |source: &str| !violations(source, "sextant_proto", names_no_wire_type).is_empty();
    assert!(flagged("use sextant_proto::MetaRequest;"));
    assert!(flagged("pub fn f(op: sextant_proto::write_request::Op) {}"));
    assert!(flagged("use sextant_proto::{convert::row, WriteReply};"));
    assert!(flagged("use sextant_proto::{\n    convert::row,\n    WriteReply,\n};"));
    assert!(flagged("use sextant_proto::convertible::X;"));
    assert!(flagged("use sextant_proto as pb;"));
    assert!(flagged("use sextant_proto::*;"));
    assert!(!flagged("use sextant_proto::convert::persist_row::encode_ingest;"));
    assert!(!flagged("use sextant_proto::tls::{certified_key, Reloading};"));
    assert!(flagged("use sextant_proto::tlsx::Thing;"));
    assert!(!flagged("use sextant_proto::convert::persist_row::{self as persist, DecodeError};"));
    assert!(!flagged("use sextant_proto::{convert::row, convert::query};"));
    assert!(!flagged("use sextant_proto::{convert::persist_row::{encode, decode}, convert::row};"));
    assert!(flagged("use sextant_proto::{convert::persist_row::{encode, decode}, Span};"));
    assert!(!flagged("/// Built from `sextant_proto::WriteRequest` at the edge."));
    assert!(!flagged("use my_sextant_proto::Thing; use sextant_proto_extra::Thing;"));
}
