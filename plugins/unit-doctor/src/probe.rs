//! Probing a check's unit through the host: what [`doctor::judge`] is given.

use crate::doctor::{Probed, describe_state};
use crate::{Check, HttpProbe, Probe};
use std::time::Duration;
use tend_sdk::{Context, Error, Host, Level, Request};

pub(crate) fn probe(ctx: &Context, host: &dyn Host, check: &Check) -> Probed {
    let unit = &check.unit;
    match &check.probe {
        Probe::Active => match host.systemd().status(unit) {
            Err(e) => Probed::Error(format!("cannot read its status: {e}")),
            Ok(status) if status.load_state == "not-found" => Probed::Error(
                "systemd does not know this unit (load-state not-found): check the unit name"
                    .to_string(),
            ),
            Ok(status) if status.active_state == "active" => Probed::Pass,
            // Starting, reloading or stopping, but not a crash loop's wait
            // between two starts ("activating (auto-restart)"): failing.
            Ok(status)
                if matches!(
                    status.active_state.as_str(),
                    "activating" | "reloading" | "deactivating"
                ) && status.sub_state != "auto-restart" =>
            {
                Probed::InTransition(describe_state(&status.active_state, &status.sub_state))
            }
            Ok(status) => Probed::Fail(describe_state(&status.active_state, &status.sub_state)),
        },
        Probe::Http(http) => {
            // The host says the unit changed state: a unit that failed is
            // unhealthy whatever its endpoint would answer.
            let triggered = ctx
                .triggers
                .iter()
                .any(|t| t.kind == "unit" && t.subject.as_deref() == Some(unit.as_str()));
            if triggered {
                match host.systemd().status(unit) {
                    Ok(status) if status.active_state == "failed" => {
                        return Probed::Fail(describe_state(
                            &status.active_state,
                            &status.sub_state,
                        ));
                    }
                    Ok(_) => {}
                    Err(e) => host.log(
                        Level::Debug,
                        &format!("{unit}: status after its unit trigger: {e}"),
                    ),
                }
            }
            probe_http(host, http)
        }
    }
}

fn probe_http(host: &dyn Host, http: &HttpProbe) -> Probed {
    let request = Request::get(&http.url).timeout(Duration::from_millis(http.timeout_ms));
    match host.http().send(&request) {
        Ok(response) if http.expect_status.contains(&response.status) => Probed::Pass,
        Ok(response) => Probed::Fail(format!("GET {} answered {}", http.url, response.status)),
        // The probe is not allowed: a configuration problem, not the unit's.
        Err(e @ (Error::Denied(_) | Error::Invalid(_) | Error::BudgetExhausted(_))) => {
            Probed::Error(format!("cannot probe: {e}"))
        }
        Err(e) => Probed::Fail(format!("GET {}: {}", http.url, e.message())),
    }
}
