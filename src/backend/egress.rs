//! SSRF guard for HTTP tools: every connection's *resolved* address is checked against an
//! allow/deny policy before connecting.
//!
//! - The global policy (`[egress]` in the server config; by default link-local and cloud
//!   metadata addresses are denied) lives in the shared client's DNS resolver, so the address
//!   that is checked is the address that is connected to: no DNS-rebinding window.
//! - URLs with an IP literal never reach a resolver; they are checked before sending.
//! - A tool's own `egress_allow` / `egress_deny` are checked before sending on a lookup of the
//!   host. For per-tool rules on *names* a rebinding window remains between that lookup and the
//!   connect (the global rules still apply to the connect itself).
//! - Redirects are never followed, so there is no second, unchecked hop.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

use crate::config::server::EgressConfig;

/// Which destination addresses HTTP tools may connect to. `allow` wins over `deny`; anything
/// not denied is allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    pub deny: Vec<IpNet>,
    pub allow: Vec<IpNet>,
}

/// A destination the policy refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the egress policy blocks {host} ({ip})")]
pub struct Blocked {
    pub host: String,
    pub ip: IpAddr,
}

impl EgressPolicy {
    /// The policy of the server config. Invalid CIDRs are rejected when the config loads.
    pub fn from_config(cfg: &EgressConfig) -> Self {
        let parse = |v: &[String]| v.iter().filter_map(|c| c.parse().ok()).collect();
        EgressPolicy {
            deny: parse(&cfg.deny),
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

    /// May we connect to `ip`? IPv4-mapped IPv6 addresses are judged as their IPv4 address.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 @ IpAddr::V4(_) => v4,
        };
        self.allow.iter().any(|n| n.contains(&ip)) || !self.deny.iter().any(|n| n.contains(&ip))
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

    #[test]
    fn default_policy_denies_link_local_and_metadata_only() {
        let p = default_policy();
        for ip in [
            "169.254.169.254",
            "169.254.1.1",
            "fe80::1",
            "fd00:ec2::254",
            "100.100.100.200",
            "::ffff:169.254.169.254",
            "0.0.0.0",
        ] {
            assert!(!p.permits(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["127.0.0.1", "10.0.0.1", "93.184.216.34", "::1"] {
            assert!(p.permits(ip.parse().unwrap()), "{ip}");
        }
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
