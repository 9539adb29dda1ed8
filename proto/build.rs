fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A vendored protoc keeps the build free of system packages.
    if std::env::var_os("PROTOC").is_none() {
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    tonic_prost_build::configure()
        .bytes(".sextant.v1.RaftRequest.body")
        .bytes(".sextant.v1.RaftReply.body")
        .bytes(".sextant.v1.WriteRequest.batch")
        .compile_protos(&["proto/sextant.proto"], &["proto"])?;
    Ok(())
}
