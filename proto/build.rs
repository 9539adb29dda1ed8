fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A vendored protoc keeps the build free of system packages.
    if std::env::var_os("PROTOC").is_none() {
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    tonic_prost_build::configure()
        .bytes(".sextant.v1.RaftRequest.body")
        .bytes(".sextant.v1.RaftReply.body")
        .bytes(".sextant.v1.WriteRequest.batch")
        // Attributes kept encoded are slices of the Raft entry they arrived in (no copy).
        .bytes(".sextant.persist.v1.SpanRow.attributes")
        .bytes(".sextant.persist.v1.LogRow.attributes")
        .bytes(".sextant.persist.v1.HostMetricRow.attributes")
        // An entry read back from the Raft log (or an RPC body) keeps its payload in place.
        .bytes(".sextant.persist.v1.Ingest.payload")
        .compile_protos(&["proto/sextant.proto", "proto/persist/raft.proto", "proto/persist/rows.proto"], &["proto"])?;
    Ok(())
}
