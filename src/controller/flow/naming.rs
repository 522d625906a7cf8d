//! Deterministic cloud names.
//!
//! Every cloud resource the operator creates is named from the object's namespace, name and
//! uid, so the operator can always find what it created (after a lost response, a crash or a
//! restart) by listing and matching the name, and so the orphan sweeper can recognise the
//! operator's resources by their mark. The uid makes an object deleted and re-created under the
//! same name a different cloud resource.

/// Every name the operator gives starts with this mark.
pub const NAME_MARK: &str = "gco-";

/// Longest name the cloud accepts.
pub const MAX_CLOUD_NAME: usize = 63;

const HASH_HEX: usize = 16;

/// `gco-<namespace>-<name>-<16 hex of a hash of namespace/name/uid>`, with the readable part
/// reduced to `[a-z0-9-]` (or `obj` when nothing readable is left) and shortened so the whole
/// fits in 63 characters.
pub fn cloud_name(namespace: &str, name: &str, uid: &str) -> String {
    let hash = fnv1a64(format!("{namespace}/{name}/{uid}").as_bytes());
    let readable_budget = MAX_CLOUD_NAME - NAME_MARK.len() - 1 - HASH_HEX;
    let mut readable = sanitize(&format!("{namespace}-{name}"));
    readable.truncate(readable_budget);
    let readable = match readable.trim_matches('-') {
        "" => "obj",
        trimmed => trimmed,
    };
    format!("{NAME_MARK}{readable}-{hash:016x}")
}

/// Whether `name` has the shape `cloud_name` gives: the orphan sweeper's test for "ours".
pub fn carries_mark(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(NAME_MARK) else {
        return false;
    };
    let Some((readable, hash)) = rest.rsplit_once('-') else {
        return false;
    };
    name.len() <= MAX_CLOUD_NAME
        && hash.len() == HASH_HEX
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && readable
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn sanitize(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out
}

/// 64-bit FNV-1a: small, and stable across Rust releases (std's hasher is not), which matters
/// because names must be the same for every version of the operator.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_marked() {
        let name = cloud_name("team-a", "train-1", "5f1c2d1e-0000-4000-8000-000000000001");
        // Pinned: a change here renames every resource the operator manages.
        assert_eq!(name, "gco-team-a-train-1-8690659ba85ac802");
        assert!(carries_mark(&name));
    }

    #[test]
    fn the_uid_distinguishes_recreated_objects() {
        assert_ne!(
            cloud_name("ns", "a", "uid-1"),
            cloud_name("ns", "a", "uid-2")
        );
        assert_ne!(cloud_name("ns-a", "b", "u"), cloud_name("ns", "a-b", "u"));
    }

    #[test]
    fn long_and_odd_names_fit_the_cloud_rules() {
        let long = "x".repeat(253);
        for (ns, name) in [
            (long.as_str(), long.as_str()),
            ("Ünïcode", "名前.with.dots"),
            ("a", "-"),
            ("名", "前"),
        ] {
            let n = cloud_name(ns, name, "uid");
            assert!(n.len() <= MAX_CLOUD_NAME, "{n}");
            assert!(carries_mark(&n), "{n}");
            assert!(!n.contains("--"), "{n}");
        }
    }

    #[test]
    fn foreign_names_do_not_carry_the_mark() {
        for foreign in [
            "train-1",
            "gco-",
            "gco-x-123",
            "gco-x-0123456789ABCDEF",
            "GCO-x-0123456789abcdef",
        ] {
            assert!(!carries_mark(foreign), "{foreign}");
        }
    }
}
