//! `courier demo` in small, as a user runs it with its output piped: the
//! progress ends on the true final counts, and the managed PostgreSQL the
//! demo started is stopped (or kept, and the last line says where).

use std::path::Path;
use std::process::{Command, Output};

fn courier(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(args)
        .current_dir(cwd)
        .env_remove("DATABASE_URL")
        .env_remove("COURIER_PG_DIR")
        .output()
        .expect("run courier")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--- stderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The last line of standard output.
fn last_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// A directory the unprivileged user that runs PostgreSQL can reach.
fn reachable_tempdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("courier-demo-test-")
        .tempdir_in("/tmp")
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

const SMALL: &[&str] = &["demo", "--actions", "60", "--stores", "6", "--workers", "2"];

#[test]
fn the_demo_ends_on_true_counts_and_stops_the_cluster_it_started() {
    let dir = reachable_tempdir();
    let pg = dir.path().join("pg");
    let pg = pg.to_str().unwrap();
    let mut args = SMALL.to_vec();
    args.extend(["--pg-dir", pg]);
    let out = courier(&args, dir.path());
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    // The plain line of final counts (what a pipe sees; a terminal also
    // keeps the bars at these counts).
    assert!(
        t.contains("pending 0 · claimed 0 · dispatched 0 · done 60 · failed 0"),
        "{t}"
    );
    assert!(t.contains("60 of 60"), "{t}");
    let last = last_line(&out);
    assert!(
        last.contains(&format!("PostgreSQL under {pg}: stopped")),
        "last line: {last}\n{t}"
    );
    let status = courier(&["db", "status", "--pg-dir", pg], dir.path());
    assert!(
        !status.status.success(),
        "the cluster still runs: {}",
        text(&status)
    );
}

#[test]
fn a_kept_cluster_is_named_in_the_last_line_and_found_by_db_stop() {
    let dir = reachable_tempdir();
    // No --pg-dir: the default place of this working directory, which
    // `courier db` run from the same directory must find.
    let mut args = SMALL.to_vec();
    args.push("--keep-db");
    let out = courier(&args, dir.path());
    let t = text(&out);
    let stop = courier(&["db", "stop"], dir.path());
    assert!(out.status.success(), "{t}");
    let last = last_line(&out);
    assert!(
        last.contains("still runs (--keep-db); stop it with `courier db stop`"),
        "last line: {last}"
    );
    let expected = courier_store::cluster::default_dir(dir.path());
    assert!(
        last.contains(&expected.display().to_string()),
        "last line: {last}, default place {}",
        expected.display()
    );
    assert!(stop.status.success(), "{}", text(&stop));
    let status = courier(&["db", "status"], dir.path());
    assert!(!status.status.success(), "{}", text(&status));
    // A second run finds the same place: the cluster's files are there.
    assert!(expected.join("data").join("PG_VERSION").exists());
    if expected.starts_with("/var/tmp/courier") {
        std::fs::remove_dir_all(expected.parent().unwrap()).ok();
    }
}
