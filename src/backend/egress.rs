//! SSRF guard for HTTP tools: every connection's *resolved* address is checked against an
//! allow/deny policy before connecting.
//!
//! - The built-in deny list ([`BUILTIN_DENY`]: link-local, cloud metadata, "this network", the
//!   unspecified address) always applies; the server's `[egress] deny` adds to it and
//!   `[egress] allow` is the explicit opt-out. The global policy lives in the clients' DNS
//!   resolver, so the address that is checked is the address that is connected to: no
//!   DNS-rebinding window.
//! - IPv6 addresses that carry an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4) are
//!   judged by that IPv4 address as well: a NAT64 gateway or 6to4 relay would deliver
//!   `64:ff9b::a9fe:a9fe` to 169.254.169.254.
//! - URLs with an IP literal never reach a resolver; they are checked before sending.
//! - A tool's own `egress_allow` / `egress_deny` are checked before sending on a lookup of the
//!   host. For per-tool rules on *names* a rebinding window remains between that lookup and the
//!   connect (the global rules still apply to the connect itself).
//! - Redirects are never followed, so there is no second, unchecked hop.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

use crate::config::server::EgressConfig;

/// Denied whatever the configuration says, unless an `allow` entry covers the address:
/// - `169.254.0.0/16`, `fe80::/10`: link-local, where cloud metadata services live
///   (169.254.169.254 on AWS, GCP, Azure, OpenStack, …);
/// - `fd00:ec2::254/128`: the AWS metadata service over IPv6;
/// - `100.100.100.200/32`: the Alibaba Cloud metadata service;
/// - `0.0.0.0/8`: "this network"; Linux connects `0.x.y.z` to the local host, around any
///   loopback rule;
/// - `::/128`: the unspecified address (also the local host when connected to).
pub const BUILTIN_DENY: &[&str] = &[
    "169.254.0.0/16",
    "fe80::/10",
    "fd00:ec2::254/128",
    "100.100.100.200/32",
    "0.0.0.0/8",
    "::/128",
];

/// Which destination addresses HTTP tools may connect to. `allow` wins over `deny`; anything
/// not denied is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPolicy {
    pub deny: Vec<IpNet>,
    pub allow: Vec<IpNet>,
}

impl Default for EgressPolicy {
    /// The built-in deny list and nothing else.
    fn default() -> Self {
        EgressPolicy {
            deny: builtin_deny(),
            allow: Vec::new(),
        }
    }
}

fn builtin_deny() -> Vec<IpNet> {
    BUILTIN_DENY.iter().filter_map(|c| c.parse().ok()).collect()
}

/// A destination the policy refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the egress policy blocks {host} ({ip})")]
pub struct Blocked {
    pub host: String,
    pub ip: IpAddr,
}

impl EgressPolicy {
    /// The policy of the server config: the built-in deny list plus `deny`, and `allow`.
    /// Invalid CIDRs are rejected when the config loads.
    pub fn from_config(cfg: &EgressConfig) -> Self {
        let parse = |v: &[String]| v.iter().filter_map(|c| c.parse().ok()).collect::<Vec<IpNet>>();
        let mut deny = builtin_deny();
        deny.extend(parse(&cfg.deny));
        EgressPolicy {
            deny,
            allow: parse(&cfg.allow),
        }
    }

    /// This policy with a tool's own rules added.
    pub fn with_rules(&self, allow: &[IpNet], deny: &[IpNet]) -> Self {
        let mut p = self.clone();
        p.allow.extend_from_slice(allow);
        p.deny.extend_from_slice(deny);
        p
    }

    /// May we connect to `ip`? An address that embeds an IPv4 address is judged as both: it is
    /// allowed when either form is allowed, denied when either form is denied.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_ipv4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        let forms = [Some(ip), embedded];
        let covered = |nets: &[IpNet]| forms.iter().flatten().any(|f| nets.iter().any(|n| n.contains(f)));
        covered(&self.allow) || !covered(&self.deny)
    }

    /// Checks every address of `host`; `Err` names the first refused one.
    pub fn check(&self, host: &str, addrs: &[IpAddr]) -> Result<(), Blocked> {
        match addrs.iter().find(|ip| !self.permits(**ip)) {
            Some(ip) => Err(Blocked {
                host: host.to_owned(),
                ip: *ip,
            }),
            None => Ok(()),
        }
    }
}

/// The IPv4 address an IPv6 address delivers to, for the forms that carry one:
/// - IPv4-mapped `::ffff:a.b.c.d` (RFC 4291) and IPv4-translated `::ffff:0:a.b.c.d` (RFC 2765);
/// - IPv4-compatible `::a.b.c.d` (deprecated, RFC 4291), except `::` and `::1`, which are the
///   unspecified and loopback addresses;
/// - NAT64 `64:ff9b::/96` (RFC 6052) and the local-use `64:ff9b:1::/48` (RFC 8215, IPv4 in bits
///   48..88 around the reserved octet);
/// - 6to4 `2002::/16` (RFC 3056, IPv4 in bits 16..48).
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    let last32 = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(last32),
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] => Some(last32),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last32),
        [0x64, 0xff9b, 1, ..] => Some(Ipv4Addr::new(o[6], o[7], o[9], o[10])),
        [0x2002, ..] => Some(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
        _ => None,
    }
}

/// The shared client's resolver: resolves, drops refused addresses, and fails with [`Blocked`]
/// when none is left.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    pub policy: Arc<EgressPolicy>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let first_refused = addrs.iter().find(|a| !policy.permits(a.ip())).map(SocketAddr::ip);
            let allowed: Vec<SocketAddr> = addrs.into_iter().filter(|a| policy.permits(a.ip())).collect();
            match (allowed.is_empty(), first_refused) {
                (true, Some(ip)) => Err(Box::new(Blocked { host, ip }) as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;

    fn default_policy() -> EgressPolicy {
        let cfg = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap()).unwrap();
        EgressPolicy::from_config(&cfg.egress)
    }

    fn config(deny: &[&str], allow: &[&str]) -> EgressPolicy {
        let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
        EgressPolicy::from_config(&EgressConfig {
            deny: own(deny),
            allow: own(allow),
        })
    }

    fn permits(p: &EgressPolicy, ip: &str) -> bool {
        p.permits(ip.parse().unwrap())
    }

    #[test]
    fn default_policy_denies_link_local_and_metadata_only() {
        let p = default_policy();
        assert_eq!(p, EgressPolicy::default());
        for ip in [
            "169.254.169.254",
            "169.254.1.1",
            "fe80::1",
            "fd00:ec2::254",
            "100.100.100.200",
            "::ffff:169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "0.255.255.255",
            "::",
        ] {
            assert!(!permits(&p, ip), "{ip}");
        }
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "93.184.216.34",
            "::1",
            "1.0.0.0",
            "2001:db8::1",
        ] {
            assert!(permits(&p, ip), "{ip}");
        }
    }

    #[test]
    fn embedded_ipv4_forms_are_judged_by_their_ipv4_address() {
        let p = default_policy();
        for ip in [
            "::ffff:169.254.169.254",   // IPv4-mapped
            "::ffff:0:169.254.169.254", // IPv4-translated
            "::169.254.169.254",        // IPv4-compatible
            "64:ff9b::a9fe:a9fe",       // NAT64 well-known prefix
            "64:ff9b::169.254.1.1",
            "64:ff9b:1:a9fe:a9:fe00::", // NAT64 local-use /48: a9.fe . (u) . a9.fe
            "2002:a9fe:a9fe::1",        // 6to4
            "2002:6464:64c8:1234::1",   // 6to4 of 100.100.100.200
            "64:ff9b::0.0.0.1",         // NAT64 of "this network"
        ] {
            assert!(!permits(&p, ip), "{ip} must be denied like its IPv4 address");
        }
        for ip in ["64:ff9b::808:808", "2002:0808:0808::1", "::ffff:10.0.0.1", "::1"] {
            assert!(permits(&p, ip), "{ip}");
        }
        assert_eq!(embedded_ipv4("::1".parse().unwrap()), None);
        assert_eq!(embedded_ipv4("::".parse().unwrap()), None);
        assert_eq!(
            embedded_ipv4("64:ff9b:1:a9fe:a9:fe00::".parse().unwrap()),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        assert_eq!(
            embedded_ipv4("2002:a9fe:a9fe::1".parse().unwrap()),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        assert_eq!(embedded_ipv4("2001:db8::a9fe:a9fe".parse().unwrap()), None);
        // A user rule on the IPv4 form covers the embedded forms, and the other way round.
        let p = config(&["10.0.0.0/8"], &[]);
        assert!(!permits(&p, "64:ff9b::a00:1"));
        assert!(!permits(&p, "2002:a00:1::"));
        let p = config(&["64:ff9b::/96"], &[]);
        assert!(!permits(&p, "64:ff9b::808:808"));
    }

    #[test]
    fn user_deny_adds_to_the_builtin_list_and_allow_opts_out() {
        let p = config(&["10.0.0.0/8"], &[]);
        assert!(!permits(&p, "10.1.2.3"));
        assert!(!permits(&p, "169.254.169.254"), "the built-in denies still apply");
        assert!(!permits(&p, "0.0.0.0"));
        let p = config(&[], &["169.254.169.254/32"]);
        assert!(permits(&p, "169.254.169.254"));
        assert!(permits(&p, "64:ff9b::a9fe:a9fe"), "allow covers the embedded forms too");
        assert!(!permits(&p, "169.254.1.1"));
    }

    #[test]
    fn allow_wins_and_tool_rules_extend() {
        let p = default_policy().with_rules(&["169.254.10.0/24".parse().unwrap()], &["10.0.0.0/8".parse().unwrap()]);
        assert!(p.permits("169.254.10.7".parse().unwrap()));
        assert!(!p.permits("10.1.2.3".parse().unwrap()));
        assert!(
            p.check("h", &["127.0.0.1".parse().unwrap(), "10.0.0.1".parse().unwrap()])
                .is_err()
        );
    }
}
