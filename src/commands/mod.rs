//! One module per subcommand. Each takes validated inputs and returns what `main` turns into
//! an exit code.

pub mod arm;
pub mod backup;
pub mod check;
pub mod conflicts;
pub mod dead;
pub mod events;
pub mod gaps;
pub mod generate;
pub mod keypair;
pub mod migrate_store;
pub mod pause;
pub mod prune;
pub mod recover;
pub mod reload;
pub mod replay;
pub mod serve;
pub mod show;
pub mod sign;

/// What an operator asked for is not in the inbox (exit code 4, not a failure of hookinbox).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotFound(pub String);
