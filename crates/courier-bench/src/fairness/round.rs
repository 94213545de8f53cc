//! One round of one scenario and claim mode: a fresh database, the
//! workers, the open-loop load, the drain and the accounting.

use super::*;

/// Where a run's workers send, and what they tell the provider.
pub(super) struct Wiring {
    pub provider_url: String,
    /// The status webhooks' URL each send names; None: no webhooks.
    pub status_callback: Option<String>,
    /// The provider gate every worker names (its ceiling and its pauses,
    /// shared through `provider_gates`); None: no gate.
    pub provider_gate: Option<String>,
}

impl Wiring {
    /// The run's shared provider, no webhooks, no gate.
    pub fn plain(provider_url: &str) -> Wiring {
        Wiring {
            provider_url: provider_url.to_string(),
            status_callback: None,
            provider_gate: None,
        }
    }
}

/// Starts the plan's workers on `url`, each with its own provider client.
pub(super) async fn start_workers(
    ctx: &Ctx<'_>,
    plan: &Plan,
    claim: ClaimMode,
    url: &str,
    wiring: &Wiring,
) -> Result<WorkerPool<ProviderClient>, BenchError> {
    let n = plan.calibration.workers;
    let clients = (0..n)
        .map(|_| {
            ProviderClient::new(ClientConfig {
                base_url: wiring.provider_url.clone(),
                api_key: API_KEY.into(),
                status_callback: wiring.status_callback.clone(),
                timeout: Duration::from_millis(plan.limits.request_timeout_ms),
            })
            .map_err(|e| BenchError::Settings(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut wc = StoreConfig::new(url);
    wc.migrate = false;
    wc.pool_size_max = (plan.calibration.concurrency as usize + 2).min(16);
    let mut worker = bench_worker(
        plan.limits.clone(),
        claim,
        courier_dispatch::owner_name(),
        ctx.cfg.idle_poll_ms,
        ctx.cfg.seed,
    );
    worker.provider_gate = wiring.provider_gate.clone();
    // A clone of a client shares its connections; each worker gets its own
    // client, and the originals are dropped with `clients`.
    let provider = |i: u32| clients[i as usize].clone();
    Ok(WorkerPool::start(n, &wc, provider, &worker).await?)
}

/// One scenario with one claim mode, on a fresh database: the workers, the
/// open-loop load, the drain, then the samples the database recorded.
pub(super) async fn run_one(
    ctx: &Ctx<'_>,
    plan: &Plan,
    claim: ClaimMode,
    schedule: &[Arrival],
    title: &str,
) -> Result<Samples, BenchError> {
    let cfg = ctx.cfg;
    let url = courier_store::database_recreate(&ctx.server_url, DATABASE).await?;
    let mut sc = StoreConfig::new(&url);
    sc.pool_size_max = 16;
    let store = PgStore::connect(&sc).await?;
    if ctx.statements {
        statements_reset(&ctx.server_url).await?;
    }
    // The workers, each with its own pool and provider client, like processes.
    let wiring = Wiring::plain(&ctx.provider_url);
    let mut pool = start_workers(ctx, plan, claim, &url, &wiring).await?;
    let bar = bar(
        cfg.progress,
        plan.duration_s,
        "{prefix} [{bar:30}] {pos}/{len} s {msg}",
    );
    bar.set_prefix(title.to_string());
    let watch = Watch::start(ctx, &store);
    let loaded = load(ctx, plan, &store, schedule, &pool, &bar).await;
    let scans = watch.scans.finish().await?;
    let lag_max_ms = match loaded {
        Ok(v) => v,
        Err(e) => {
            let _ = pool.stop().await;
            bar.abandon();
            return Err(e);
        }
    };
    bar.set_position(plan.duration_s);
    let drained = drain_queue(cfg, &store, &pool, &bar, title).await;
    let readings = watch.cpu.finish().await?;
    let late = watch.late.finish().await?;
    pool.stop().await?;
    bar.finish_with_message(format!("done · accepted {}", pool.settled()));
    drained?;
    let statements = if ctx.statements {
        statements_top(&ctx.server_url, DATABASE, STATEMENTS_MAX).await?
    } else {
        Vec::new()
    };
    let rows = store.latencies_enqueue_to_accepted().await?;
    let probed = Probed {
        scans,
        readings,
        late,
    };
    Ok(samples(cfg, plan, &rows, probed, statements, lag_max_ms))
}

/// The probes a run asked for, while it runs.
struct Watch {
    /// Sequential scans of `actions`, while the load lasts (not while the
    /// queue drains: the drain's own progress query counts actions by a scan).
    scans: Running<Vec<f64>>,
    /// The CPU and the runtime's lateness, until the queue has drained, so
    /// the last second's actions are covered while they live.
    cpu: Running<Vec<cpu::Reading>>,
    late: Running<Vec<(f64, f64)>>,
}

impl Watch {
    fn start(ctx: &Ctx<'_>, store: &PgStore) -> Watch {
        let probes = ctx.cfg.probes;
        let roles = cpu::Roles {
            postmaster: ctx.postmaster,
            bench: std::process::id(),
            ..cpu::Roles::default()
        };
        let t0 = Instant::now();
        let scans = ScanProbe {
            store: store.clone(),
            table: "actions",
        };
        Watch {
            scans: Running::start_if(probes.scans, scans, t0),
            cpu: Running::start_if(probes.cpu, CpuProbe { roles }, t0),
            late: Running::start_if(probes.lateness, LatenessProbe, t0),
        }
    }
}

/// What the probes read in one run (`None`: not asked for).
pub(super) struct Probed {
    pub scans: Option<Vec<f64>>,
    pub readings: Option<Vec<cpu::Reading>>,
    pub late: Option<Vec<(f64, f64)>>,
}

/// The open-loop load for its whole duration, with the progress bar;
/// answers the largest lag behind schedule, in ms.
pub(super) async fn load(
    ctx: &Ctx<'_>,
    plan: &Plan,
    store: &PgStore,
    schedule: &[Arrival],
    pool: &WorkerPool<ProviderClient>,
    bar: &indicatif::ProgressBar,
) -> Result<f64, BenchError> {
    let enqueued = Arc::new(AtomicU64::new(0));
    let load_started = Instant::now();
    let generated = {
        let load = generate(store, schedule, ctx.cfg, plan.duration_s, enqueued.clone());
        tokio::pin!(load);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                r = &mut load => break r,
                _ = tick.tick() => {
                    bar.set_position(load_started.elapsed().as_secs().min(plan.duration_s));
                    bar.set_message(format!(
                        "enqueued {} · accepted {}",
                        enqueued.load(Ordering::Relaxed),
                        pool.settled()
                    ));
                }
            }
        }
    };
    // The load lasts its whole duration, however early its last arrival
    // was enqueued.
    tokio::time::sleep_until((load_started + Duration::from_secs(plan.duration_s)).into()).await;
    generated
}

/// Lets the queue drain, within the run's drain time-out.
async fn drain_queue(
    cfg: &FairnessConfig,
    store: &PgStore,
    pool: &WorkerPool<ProviderClient>,
    bar: &indicatif::ProgressBar,
    title: &str,
) -> Result<Instant, BenchError> {
    let limit = Duration::from_secs(cfg.drain_timeout_s);
    let what = format!("draining the queue of {title}");
    drain(&what, limit, Duration::from_millis(100), async || {
        let p = store.actions_progress().await?;
        bar.set_message(format!(
            "draining: {} open · accepted {}",
            p.open,
            pool.settled()
        ));
        let total = u64::try_from(p.total).unwrap_or(0);
        let open = u64::try_from(p.open).unwrap_or(0);
        Ok(Progress {
            done: total - open.min(total),
            total,
        })
    })
    .await
}

/// The actions of one run, split as the accounting reads them.
#[derive(Default)]
pub(super) struct Split {
    pub quiet_us: Vec<u64>,
    quiet_wait_us: Vec<u64>,
    /// Quiet `(enqueued_ms, latency_us)`, warm-up included.
    quiet_timeline: Vec<(f64, u64)>,
    /// Quiet `(enqueued_ms, latency_us, wait_us)`, warm-up included.
    quiet_split: Vec<(f64, u64, u64)>,
    noisy_us: Vec<u64>,
    hold_us_total: u64,
    /// Enqueue second to (hold us, actions).
    holds: std::collections::BTreeMap<u64, (u64, u64)>,
    last_ms: f64,
}

/// Splits the accepted actions into quiet and noisy, warm-up apart.
pub(super) fn split(cfg: &FairnessConfig, rows: &[ActionLatency]) -> Split {
    let warmup_ms = cfg.warmup_s as f64 * 1000.0;
    let is_noisy = |s: &str| (0..cfg.noisy_stores).any(|i| store_name(i) == s);
    let mut out = Split::default();
    for r in rows {
        out.hold_us_total += r.hold_us;
        let second = out
            .holds
            .entry((r.enqueued_ms.max(0.0) / 1000.0) as u64)
            .or_default();
        second.0 += r.hold_us;
        second.1 += 1;
        out.last_ms = out
            .last_ms
            .max(r.enqueued_ms + r.latency_us as f64 / 1000.0);
        if is_noisy(&r.store) {
            out.noisy_us.push(r.latency_us);
        } else {
            out.quiet_timeline.push((r.enqueued_ms, r.latency_us));
            out.quiet_split
                .push((r.enqueued_ms, r.latency_us, r.wait_us));
            if r.enqueued_ms >= warmup_ms {
                out.quiet_us.push(r.latency_us);
                out.quiet_wait_us.push(r.wait_us);
            }
        }
    }
    out
}

/// What one run measured, from the database's rows and the probes.
pub(super) fn samples(
    cfg: &FairnessConfig,
    plan: &Plan,
    rows: &[ActionLatency],
    probed: Probed,
    statements: Vec<StatementStat>,
    lag_max_ms: f64,
) -> Samples {
    let s = split(cfg, rows);
    let warmup_ms = cfg.warmup_s as f64 * 1000.0;
    let load_end_ms = plan.duration_s as f64 * 1000.0;
    let span = Span {
        from_ms: warmup_ms,
        to_ms: load_end_ms,
    };
    Samples {
        trend: trend_ratio(&s.quiet_timeline, warmup_ms, load_end_ms),
        thirds: thirds_p95(&s.quiet_split, warmup_ms, load_end_ms),
        cpu: probed.readings.as_deref().map(|r| round_cpu(r, span)),
        stalls: round_stalls(&s.quiet_split, span, &probed),
        seq_scans_per_s: probed.scans,
        statements,
        quiet_us: s.quiet_us,
        quiet_wait_us: s.quiet_wait_us,
        quiet_timeline: s.quiet_timeline,
        noisy_us: s.noisy_us,
        actions: rows.len() as u64,
        hold_us_total: s.hold_us_total,
        hold_ms_by_second: s
            .holds
            .values()
            .map(|(us, n)| *us as f64 / 1000.0 / (*n).max(1) as f64)
            .collect(),
        window_ms: s.last_ms.max(1.0),
        lag_max_ms,
    }
}

/// The measured load of a run: after the warm-up, to the load's end.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub from_ms: f64,
    pub to_ms: f64,
}

impl Span {
    /// Its `i`th third.
    fn third(self, i: u32) -> Span {
        let third_ms = (self.to_ms - self.from_ms) / 3.0;
        let from_ms = self.from_ms + third_ms * f64::from(i);
        Span {
            from_ms,
            to_ms: from_ms + third_ms,
        }
    }
}

/// The CPU over the measured load, whole and by thirds.
fn round_cpu(readings: &[cpu::Reading], span: Span) -> RoundCpu {
    let cores = cpu::machine_cores();
    RoundCpu {
        load: cpu::span(readings, span.from_ms, span.to_ms, cores),
        thirds: (0..3)
            .map(|i| {
                let t = span.third(i);
                cpu::span(readings, t.from_ms, t.to_ms, cores)
            })
            .collect(),
    }
}

/// Where the run stalled, when the CPU or the lateness probe was on.
fn round_stalls(
    quiet_split: &[(f64, u64, u64)],
    span: Span,
    probed: &Probed,
) -> Option<RoundStalls> {
    if probed.readings.is_none() && probed.late.is_none() {
        return None;
    }
    let readings = probed.readings.as_deref().unwrap_or_default();
    Some(RoundStalls {
        worst_second: worst_second(
            quiet_split,
            span.from_ms,
            span.to_ms,
            WORST_SECOND_SAMPLES_MIN,
            readings,
            probed.late.as_deref(),
        ),
        runtime_late_max_ms_by_third: probed.late.as_deref().map_or_else(Vec::new, |late| {
            (0..3)
                .map(|i| {
                    let t = span.third(i);
                    late_max(late, t.from_ms, t.to_ms)
                })
                .collect()
        }),
    })
}

/// Enqueues the schedule open-loop: each arrival at its time, without
/// waiting for earlier ones (up to `enqueue_in_flight_max` at once). Returns
/// the largest lag behind schedule, in ms.
pub(super) async fn generate(
    store: &PgStore,
    schedule: &[Arrival],
    cfg: &FairnessConfig,
    duration_s: u64,
    enqueued: Arc<AtomicU64>,
) -> Result<f64, BenchError> {
    let permits = Arc::new(Semaphore::new(cfg.enqueue_in_flight_max));
    let mut tasks = tokio::task::JoinSet::new();
    let start = tokio::time::Instant::now();
    let mut lag_max_ms = 0f64;
    for a in schedule {
        let due = start + Duration::from_secs_f64(a.at_ms / 1000.0);
        tokio::time::sleep_until(due).await;
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| BenchError::Task(e.to_string()))?;
        lag_max_ms = lag_max_ms.max(due.elapsed().as_secs_f64() * 1000.0);
        // Collect finished enqueues as we go, so errors surface early.
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
        let a = *a;
        let store = store.clone();
        let name = store_name(a.store);
        let count = a.count;
        let enqueued = enqueued.clone();
        tasks.spawn(async move {
            let _permit = permit;
            if count == 1 {
                // Named by the store and the arrival's place among its
                // store's: the same message in every run of a round.
                let mut body = format!("bench message {} of {}", a.ordinal, a.store);
                if let Some(ms) = a.latency_ms {
                    body.push_str(&format!(" [latency {ms} ms]"));
                }
                let new = NewAction {
                    store: name,
                    to: format!("+1555{:07}", a.store % 10_000_000),
                    body,
                    key: None,
                    ..Default::default()
                };
                store.action_enqueue(&new).await.map_err(|e| match e {
                    courier_store::EnqueueError::Store(s) => BenchError::Store(s),
                    other => BenchError::Task(other.to_string()),
                })?;
            } else {
                store.actions_enqueue_bulk(&[name], count).await?;
            }
            enqueued.fetch_add(u64::from(count), Ordering::Relaxed);
            Ok::<(), BenchError>(())
        });
    }
    // The load lasts the whole duration even when the last arrival is early.
    tokio::time::sleep_until(start + Duration::from_secs(duration_s)).await;
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(lag_max_ms)
}
