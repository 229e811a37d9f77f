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
pub mod show_cert;
pub mod sign;

/// What an operator asked for is not in the inbox (exit code 4, not a failure of hookinbox).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotFound(pub String);

/// What a read command (`events`, `dead`, `conflicts`, `gaps`) tells the operator when its
/// `--source` or `--target` names nothing in the config: a typo would otherwise show an
/// empty table, and "nothing arrived" is the wrong conclusion to draw from it. A warning,
/// not a refusal: the inbox still holds the events of a source since removed from the
/// config, and those can be read by its name. Without the config (`--db` alone), nothing.
pub fn unconfigured_names(
    config: Option<&crate::config::Offline>,
    source: Option<&str>,
    target: Option<&str>,
) -> Option<String> {
    let config = config?;
    // The alerts' own source is hookinbox's, never configured, nor are its targets.
    if source == Some(crate::alerts::SOURCE) {
        return None;
    }
    let names = |v: Vec<String>| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join(", ")
        }
    };
    let at = config.path.display();
    if let Some(source) = source
        && !config.sources.iter().any(|s| s.name == source)
    {
        let configured = names(config.sources.iter().map(|s| s.name.clone()).collect());
        return Some(format!(
            "no source {source:?} in {at} (configured: {configured}); showing what the inbox \
             holds under that name"
        ));
    }
    let target = target?;
    let pairs: Vec<(&str, &str)> = config
        .sources
        .iter()
        .filter(|s| source.is_none_or(|want| want == s.name))
        .flat_map(|s| s.targets.iter().map(move |t| (s.name.as_str(), t.as_str())))
        .collect();
    if pairs.iter().any(|(_, t)| *t == target) {
        return None;
    }
    let configured = names(pairs.iter().map(|(s, t)| format!("{s}/{t}")).collect());
    Some(format!(
        "no target {target:?} in {at} (configured: {configured}); showing what the inbox holds \
         under that name"
    ))
}
