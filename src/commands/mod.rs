//! One module per subcommand. Each takes validated inputs and returns what `main` turns into
//! an exit code.

pub mod check;
pub mod serve;
pub mod sign;
