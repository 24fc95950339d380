//! Embeds the migrations: writes `$OUT_DIR/migrations.rs`, the list of `(version, description, SQL)` of
//! every `VERSION_DESCRIPTION.sql` in `../migrations` by version, as `sqlx::migrate!` reads that folder
//! (the description is the name's rest with `_` as spaces), and makes cargo rebuild the crate when one
//! is added or changed.
use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("../migrations");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut migrations = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the migrations folder") {
        let path = entry.expect("a folder entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).expect("a UTF-8 file name").to_owned();
        let Some((version, rest)) = name.split_once('_') else { continue };
        let Some(description) = rest.strip_suffix(".sql") else { continue };
        assert!(
            !description.ends_with(".up") && !description.ends_with(".down"),
            "{name}: Herald's migrations are simple (no .up/.down pairs)"
        );
        let version: i64 = version.parse().unwrap_or_else(|_| panic!("{name}: the name must start with a number"));
        println!("cargo:rerun-if-changed={}", path.display());
        migrations.push((version, description.replace('_', " "), path.canonicalize().expect("a path")));
    }
    migrations.sort_by_key(|(version, _, _)| *version);
    let mut out = String::from("&[\n");
    for (version, description, path) in &migrations {
        writeln!(out, "    ({version}, {description:?}, include_str!({:?})),", path.display().to_string())
            .expect("a string");
    }
    out.push_str("]\n");
    let target = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("migrations.rs");
    std::fs::write(target, out).expect("write migrations.rs");
}
