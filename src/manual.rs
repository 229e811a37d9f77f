//! The vocabulary of the configuration's manual: a table of the file and its keys, as plain
//! data. The reference ([`crate::config::reference`]) lists every table with it; a kind of
//! target ([`crate::targets`]) documents its own keys with it.

/// One table of the file.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// As written in the file: `[server]`, `[[sources]]`, `[sources.order]`.
    pub header: &'static str,
    /// What the table is for, and anything true of all its keys.
    pub about: &'static str,
    pub keys: &'static [Key],
}

/// One key of a table.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    /// What is written: a word from [`crate::config::reference::FORMS`] or a short phrase.
    pub form: &'static str,
    pub if_absent: IfAbsent,
    pub meaning: &'static str,
}

/// What a key that is not written means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfAbsent {
    /// The file must set it.
    Required,
    /// Nothing is set: the feature is off, or the meaning says what happens instead.
    Off,
    /// This value, as the file would write it (TOML): writing it changes nothing (tested).
    Default(&'static str),
    /// Worked out from other settings, in words.
    Derived(&'static str),
}

impl Section {
    /// The table's path in the file: `sources.targets` for `[[sources.targets]]`.
    pub fn path(&self) -> &'static str {
        self.header.trim_matches(|c| c == '[' || c == ']')
    }
}
