//! The server's label is its `serverInfo.name`, text the server chose up to a whole
//! message long. It is kept for the life of the connection, copied into the host's
//! diagnostics and logs, and is the `source` of every tag expansion (§16.5), which copies it
//! for each event under an accepted ontology: a 16 MiB name made every small push cost
//! 32 MiB of copying. It is kept cut to [`DIAGNOSTIC_TEXT_BYTES`] ([`clip_text`], its
//! length said), as every other text of the server's the host keeps.

use super::*;

#[test]
fn a_huge_server_name_is_kept_cut_to_its_bound() {
    let mut p = Pair::new(&["pushEvents"], server_rules());
    p.host.start(p.now);
    p.step_server();
    p.to_host.clear();
    let name = "n".repeat(2 * 1024 * 1024);
    p.server_writes(json!({
        "jsonrpc": "2.0", "id": 1,
        "result": { "protocolVersion": "2025-06-18",
                    "capabilities": { "tools": {}, "experimental": { "mcpl": manifest() } },
                    "serverInfo": { "name": name } }
    }));
    p.drive();
    assert!(matches!(p.connected()[..], [Ok(())]), "{:?}", p.connected());
    let label = p.host.label();
    assert!(
        label.len() <= DIAGNOSTIC_TEXT_BYTES,
        "the label kept {} bytes",
        label.len()
    );
    assert!(
        label.starts_with("nnn") && label.ends_with("(2097152 bytes)"),
        "{label}"
    );
    // A name within the bound is kept as it is.
    let mut q = Pair::connect(&["pushEvents"], server_rules());
    q.drive();
    assert_eq!(q.host.label(), "pair-server");
}
