//! Sign-in sessions: refresh-token families, their rotation with reuse detection, and their
//! revocation (docs/API.md, "Refresh-token rotation and its 10 s grace").

use std::collections::BTreeMap;

use sextant_model::meta::{
    MetaCommandResult, RefreshFamily, Refusal, MAX_REFRESH_ALTERNATES, MAX_SESSIONS_PER_USER, REFRESH_GRACE_MS,
    REFRESH_TTL_MS, TOMBSTONE_MS,
};
use sextant_model::UserId;

use super::{same_hash, MetaState};
use MetaCommandResult::{Done, Refused};

/// Refresh-token families by id; revoked ones are kept as tombstones while access tokens
/// issued from them may still be presented.
#[derive(Clone, Debug, Default)]
pub(super) struct Sessions {
    pub(super) families: BTreeMap<String, RefreshFamily>,
}

impl Sessions {
    fn revoke(family: &mut RefreshFamily, now_ms: i64) {
        if family.revoked_at_ms.is_none() {
            family.revoked_at_ms = Some(now_ms);
        }
    }

    /// Stores a new session, dropping the user's oldest ones beyond the per-user bound.
    pub(super) fn add(&mut self, session: RefreshFamily) {
        let user = session.user_id;
        self.families.insert(session.id.clone(), session);
        let mut live: Vec<(i64, String)> = self
            .families
            .values()
            .filter(|s| s.user_id == user && s.revoked_at_ms.is_none())
            .map(|s| (s.created_at_ms, s.id.clone()))
            .collect();
        if live.len() > MAX_SESSIONS_PER_USER {
            live.sort();
            let now = live.last().map_or(0, |l| l.0);
            for (_, id) in &live[..live.len() - MAX_SESSIONS_PER_USER] {
                if let Some(s) = self.families.get_mut(id) {
                    Self::revoke(s, now);
                }
            }
        }
    }

    /// Revokes every session of a user (removed, or gone with their org).
    pub(super) fn revoke_user(&mut self, user_id: UserId, now_ms: i64) {
        for s in self.families.values_mut().filter(|s| s.user_id == user_id) {
            Self::revoke(s, now_ms);
        }
    }

    /// Sign-out: needs a token of the family, not just its id (an access token's `sid`).
    pub(super) fn end(&mut self, family: &str, presented: &str, now_ms: i64) -> MetaCommandResult {
        let Some(f) = self.families.get_mut(family) else {
            return Refused(Refusal::InvalidSession);
        };
        let live = same_hash(&f.current_sha256, presented)
            || f.alternates_sha256.iter().any(|a| same_hash(a, presented))
            || f.previous_sha256.as_deref().is_some_and(|p| same_hash(p, presented));
        if !live {
            return Refused(Refusal::InvalidSession);
        }
        Self::revoke(f, now_ms);
        Done
    }

    /// Ids of the revoked families still kept.
    pub(super) fn revoked(&self) -> Vec<String> {
        self.families.values().filter(|s| s.revoked_at_ms.is_some()).map(|s| s.id.clone()).collect()
    }

    /// Drops what can no longer matter at `now_ms`.
    pub(super) fn prune(&mut self, now_ms: i64) {
        self.families.retain(|_, s| match s.revoked_at_ms {
            Some(at) => now_ms - at < TOMBSTONE_MS,
            None => s.expires_at_ms > now_ms,
        });
    }
}

impl MetaState {
    /// Rotation with reuse detection. The current token, or one handed out alongside it,
    /// rotates. The token replaced last is accepted again within the grace window (a retry
    /// whose answer was lost, or two tabs refreshing at once) and gets a token valid alongside
    /// the current one. Any other old token means two parties hold the family's tokens, so
    /// the whole family is revoked.
    pub(super) fn rotate(
        &mut self,
        family: &str,
        presented: &str,
        new_sha256: String,
        now_ms: i64,
    ) -> MetaCommandResult {
        let Some(f) = self.sessions.families.get_mut(family) else {
            return Refused(Refusal::InvalidSession);
        };
        if f.revoked_at_ms.is_some() || f.expires_at_ms <= now_ms {
            return Refused(Refusal::InvalidSession);
        }
        let is_current = same_hash(&f.current_sha256, presented);
        let is_alternate = f.alternates_sha256.iter().any(|a| same_hash(a, presented));
        let is_previous = f.previous_sha256.as_deref().is_some_and(|p| same_hash(p, presented));
        if is_current || is_alternate {
            f.previous_sha256 = Some(presented.to_owned());
            f.current_sha256 = new_sha256;
            f.alternates_sha256.clear();
            f.rotated_at_ms = now_ms;
        } else if is_previous && now_ms - f.rotated_at_ms <= REFRESH_GRACE_MS {
            if f.alternates_sha256.len() >= MAX_REFRESH_ALTERNATES {
                // Not reuse by a second party, just too many retries: refuse this one only.
                return Refused(Refusal::InvalidSession);
            }
            f.alternates_sha256.push(new_sha256);
        } else {
            Sessions::revoke(f, now_ms);
            return Refused(Refusal::SessionReused);
        }
        f.expires_at_ms = now_ms + REFRESH_TTL_MS;
        let (user_id, org_id) = (f.user_id, f.org_id);
        match self.accounts.users.get(&user_id).filter(|u| u.org_id == org_id) {
            Some(u) => MetaCommandResult::Session { user: u.member() },
            None => Refused(Refusal::InvalidSession),
        }
    }

    pub(super) fn start_session(&mut self, session: RefreshFamily) -> MetaCommandResult {
        match self.accounts.users.get(&session.user_id) {
            Some(u) if u.org_id == session.org_id => {}
            _ => return Refused(Refusal::InvalidSession),
        }
        self.sessions.add(session);
        Done
    }
}

#[cfg(test)]
mod tests {
    use crate::meta::testing::*;

    fn rotate(s: &mut MetaState, presented: &str, new: &str, now: i64) -> MetaCommandResult {
        s.execute(MetaCommand::RotateSession {
            family: "fam".into(),
            presented_sha256: presented.into(),
            new_sha256: new.into(),
            now_ms: now,
        })
    }

    #[test]
    fn rotation_chain_and_reuse_revokes_the_family() {
        let (mut s, user) = state_with_user();
        assert!(
            matches!(rotate(&mut s, "h0", "h1", T0 + 1), MetaCommandResult::Session { user: m } if m.id == user.id)
        );
        assert!(matches!(rotate(&mut s, "h1", "h2", T0 + 60_000), MetaCommandResult::Session { .. }));
        // h0 is two rotations old: reuse, and the family dies with it.
        assert_eq!(rotate(&mut s, "h0", "hx", T0 + 60_001), Refused(Refusal::SessionReused));
        assert_eq!(rotate(&mut s, "h2", "h3", T0 + 60_002), Refused(Refusal::InvalidSession));
        let view: MetaView = read(&s, &MetaQuery::View);
        assert_eq!(view.revoked_sessions, vec!["fam".to_string()]);
    }

    #[test]
    fn previous_token_is_accepted_only_within_the_grace_window() {
        let (mut s, _) = state_with_user();
        let ok = |r: MetaCommandResult| matches!(r, MetaCommandResult::Session { .. });
        assert!(ok(rotate(&mut s, "h0", "h1", T0)));
        // A second tab (or a retry) with h0: a token valid alongside h1, and h1 stays valid.
        assert!(ok(rotate(&mut s, "h0", "h1b", T0 + REFRESH_GRACE_MS)));
        assert_eq!(s.sessions.families["fam"].alternates_sha256, ["h1b"]);
        // Whichever of them the browser kept rotates; the other is then dropped.
        assert!(ok(rotate(&mut s, "h1b", "h2", T0 + REFRESH_GRACE_MS + 1)));
        assert!(s.sessions.families["fam"].alternates_sha256.is_empty());
        // h1b is now previous, but the window since the last rotation has passed.
        let late = T0 + 2 * REFRESH_GRACE_MS + 2;
        assert_eq!(rotate(&mut s, "h1b", "h3", late), Refused(Refusal::SessionReused));
    }

    #[test]
    fn a_sibling_of_the_current_token_rotates_and_retries_are_bounded() {
        let (mut s, _) = state_with_user();
        let ok = |r: MetaCommandResult| matches!(r, MetaCommandResult::Session { .. });
        assert!(ok(rotate(&mut s, "h0", "h1", T0)));
        for i in 0..MAX_REFRESH_ALTERNATES {
            assert!(ok(rotate(&mut s, "h0", &format!("a{i}"), T0 + 1)));
        }
        // One retry too many is refused without killing the session.
        assert_eq!(rotate(&mut s, "h0", "ax", T0 + 2), Refused(Refusal::InvalidSession));
        assert!(ok(rotate(&mut s, "h1", "h2", T0 + 3)));
        // After that rotation the dropped siblings count as reuse.
        assert_eq!(rotate(&mut s, "a0", "h3", T0 + 4), Refused(Refusal::SessionReused));
    }

    #[test]
    fn unknown_expired_and_ended_sessions_do_not_rotate() {
        let (mut s, _) = state_with_user();
        let r = s.execute(MetaCommand::RotateSession {
            family: "nope".into(),
            presented_sha256: "h0".into(),
            new_sha256: "h1".into(),
            now_ms: T0,
        });
        assert_eq!(r, Refused(Refusal::InvalidSession));
        assert_eq!(rotate(&mut s, "h0", "h1", T0 + REFRESH_TTL_MS), Refused(Refusal::InvalidSession));
        let (mut s, _) = state_with_user();
        let end =
            |token: &str| MetaCommand::EndSession { family: "fam".into(), presented_sha256: token.into(), now_ms: T0 };
        // The family id alone (an access token's `sid`) cannot end someone's session.
        assert_eq!(s.execute(end("guess")), Refused(Refusal::InvalidSession));
        assert!(s.sessions.families["fam"].revoked_at_ms.is_none());
        assert_eq!(s.execute(end("h0")), Done);
        assert_eq!(rotate(&mut s, "h0", "h1", T0 + 1), Refused(Refusal::InvalidSession));
    }
}
