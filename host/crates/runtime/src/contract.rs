//! Which version of the contract a component was built for (the
//! `jinghzhu:operator` WIT package for the `Jinghzhu` kind, 0.1 and 0.2;
//! the generic `wasm-operator:controller` package for any kind, 0.3), told
//! from the name of the `reconciler` interface it exports, and the
//! versions this host serves.

use super::bindings::{self, v2, v3};

/// A contract version the host serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContractVersion {
    /// `jinghzhu:operator@0.1.0` (`wit/operator.wit`): one value per string
    /// and per list.
    V0_1,
    /// `jinghzhu:operator@0.2.0` (`wit/0.2/operator.wit`): strings in one
    /// table, labels and owners in shared flat lists.
    V0_2,
    /// `wasm-operator:controller@0.3.0` (`wit/0.3/controller.wit`): any
    /// parent kind and its children; serves a `PluginController`.
    V0_3,
}

impl ContractVersion {
    /// Every version served, oldest first.
    pub const ALL: [ContractVersion; 3] = [
        ContractVersion::V0_1,
        ContractVersion::V0_2,
        ContractVersion::V0_3,
    ];

    /// Whether plugins of this version reconcile any kind (a
    /// `PluginController`) rather than `Jinghzhu` (`--plugin`, a
    /// `JinghzhuPlugin`).
    pub fn is_generic(self) -> bool {
        self == ContractVersion::V0_3
    }

    /// `0.1.0` or `0.2.0`.
    pub fn as_str(self) -> &'static str {
        match self {
            ContractVersion::V0_1 => "0.1.0",
            ContractVersion::V0_2 => "0.2.0",
            ContractVersion::V0_3 => "0.3.0",
        }
    }

    /// The WIT package, e.g. `jinghzhu:operator@0.2.0`.
    pub fn package(self) -> &'static str {
        match self {
            ContractVersion::V0_1 => bindings::WIT_PACKAGE,
            ContractVersion::V0_2 => v2::WIT_PACKAGE,
            ContractVersion::V0_3 => v3::WIT_PACKAGE,
        }
    }

    /// The interface a plugin of this version exports.
    pub fn export(self) -> &'static str {
        match self {
            ContractVersion::V0_1 => bindings::EXPECTED_EXPORT,
            ContractVersion::V0_2 => v2::EXPECTED_EXPORT,
            ContractVersion::V0_3 => v3::EXPECTED_EXPORT,
        }
    }

    /// The version named `version` (`0.2.0`), if served.
    pub fn parse(version: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == version)
    }
}

impl std::fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The prefixes of the `reconciler` export names, before the version: the
/// `Jinghzhu` contract's and the generic one's.
const RECONCILERS: [&str; 2] = [
    "jinghzhu:operator/reconciler@",
    "wasm-operator:controller/reconciler@",
];

/// Whether `name` is an interface of one of the contract's packages.
pub fn is_contract_interface(name: &str) -> bool {
    name.starts_with("jinghzhu:operator/") || name.starts_with("wasm-operator:controller/")
}

/// What a component's exports say about its contract version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detected {
    /// It exports the `reconciler` of a version this host serves.
    Served(ContractVersion),
    /// It exports a `reconciler` of another version (the version given).
    Unserved(String),
    /// It exports no `reconciler` of any version.
    NoReconciler,
}

/// Looks for a `jinghzhu:operator/reconciler@X` or a
/// `wasm-operator:controller/reconciler@X` among `exports`.
pub fn detect<'e>(exports: impl IntoIterator<Item = &'e str>) -> Detected {
    let mut other = None;
    for name in exports {
        let version = RECONCILERS
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix));
        if let Some(version) = version {
            match ContractVersion::parse(version) {
                Some(served) if served.export() == name => return Detected::Served(served),
                _ => other = Some(version.to_string()),
            }
        }
    }
    other.map_or(Detected::NoReconciler, Detected::Unserved)
}

/// `0.1.0, 0.2.0`: the versions served, for messages, `--version`,
/// `/status` and metrics.
pub fn supported() -> String {
    ContractVersion::ALL.map(ContractVersion::as_str).join(", ")
}

/// What `wasm-operator --version` prints after the program name: the
/// host's version and the contract versions it serves.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (plugin contracts: jinghzhu:operator 0.1.0, 0.2.0; wasm-operator:controller 0.3.0)"
);

/// The newest version of the `Jinghzhu` contract: what new `Jinghzhu`
/// plugins and the SDKs target.
pub const LATEST: ContractVersion = ContractVersion::V0_2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_told_from_the_export_name() {
        let d = |names: &[&str]| detect(names.iter().copied());
        assert_eq!(
            d(&["wasi:cli/run@0.2.0", "jinghzhu:operator/reconciler@0.1.0"]),
            Detected::Served(ContractVersion::V0_1)
        );
        assert_eq!(
            d(&["jinghzhu:operator/reconciler@0.2.0"]),
            Detected::Served(ContractVersion::V0_2)
        );
        assert_eq!(
            d(&["jinghzhu:operator/reconciler@0.9.0"]),
            Detected::Unserved("0.9.0".into())
        );
        assert_eq!(
            d(&["wasm-operator:controller/reconciler@0.3.0"]),
            Detected::Served(ContractVersion::V0_3)
        );
        // A version of the other package is not served.
        assert_eq!(
            d(&["jinghzhu:operator/reconciler@0.3.0"]),
            Detected::Unserved("0.3.0".into())
        );
        assert_eq!(d(&["wasi:cli/run@0.2.0"]), Detected::NoReconciler);
        assert_eq!(supported(), "0.1.0, 0.2.0, 0.3.0");
        assert!(
            VERSION_LINE
                .ends_with("jinghzhu:operator 0.1.0, 0.2.0; wasm-operator:controller 0.3.0)")
        );
        assert!(ContractVersion::V0_3.is_generic() && !ContractVersion::V0_2.is_generic());
        assert_eq!(
            ContractVersion::V0_2.export(),
            "jinghzhu:operator/reconciler@0.2.0"
        );
    }
}
