//! A background check run at a fixed interval until the configuration
//! stops: the reload loops of *hosts* and *file*.

use std::sync::Arc;
use std::time::Duration;

/// Spawns a task on the current runtime that calls `check` on a blocking
/// thread every `period` (the first call one period from now) until
/// `stop` turns true or its sender is dropped. Ticks missed while a check
/// runs are not made up. Fails, naming `plugin`, outside a runtime.
pub(crate) fn every<T: Send + Sync + 'static>(
    plugin: &str,
    period: Duration,
    target: Arc<T>,
    check: fn(&T),
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Err(format!(
            "plugin/{plugin}: no runtime to run the reload task on"
        ));
    };
    rt.spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let t = target.clone();
                    let _ = tokio::task::spawn_blocking(move || check(&t)).await;
                }
                r = stop.changed() => {
                    if r.is_err() || *stop.borrow() {
                        break;
                    }
                }
            }
        }
    });
    Ok(())
}
