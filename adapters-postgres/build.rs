//! Rebuilds the crate when a migration is added: `sqlx::migrate!` embeds the folder's files, and
//! cargo only knows to look at that folder when told.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
