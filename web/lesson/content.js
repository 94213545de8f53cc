// The lesson's words: scene introductions, term cards, quizzes and sources.
// Figures are never written here: every number on the page comes from the
// simulations through the API.
"use strict";

window.Lesson = window.Lesson || {};

// Script errors are kept where the browser test can see them.
window.__lessonErrors = window.__lessonErrors || [];
window.addEventListener("error", (e) => window.__lessonErrors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.__lessonErrors.push(String(e.reason)));

window.Lesson.content = {
  scenes: {
    "ack": {
      kicker: "1 · Delivery guarantees",
      title: "When do you say “done”?",
      intro: [
        "A network can lose a message, and it can lose the reply to a message, and the sender cannot tell which of the two happened. So a broker that wants every message handled keeps redelivering until the consumer acknowledges it. Promising that each message arrives <em>exactly once</em> is impossible this way — it is the <a href=\"#\" data-term=\"two-generals\">Two Generals problem</a> in disguise.",
        "What a system can promise is an <a href=\"#\" data-term=\"exactly-once-effect\">exactly-once effect</a>: deliver <a href=\"#\" data-term=\"at-least-once\">at least once</a>, and make the second delivery harmless. Where the consumer sends its <a href=\"#\" data-term=\"ack\">acknowledgement</a> decides which failure you get when it crashes.",
        "The three strategies below: <strong>ack first</strong> is <a href=\"#\" data-term=\"at-most-once\">at-most-once</a> (a crash after the ack loses the message); <strong>ack after</strong> is <a href=\"#\" data-term=\"at-least-once\">at-least-once</a> (a crash before the ack delivers it again — for a payment, a double delivery is a double charge); <strong>ack after + dedup table</strong> is at-least-once delivery with a <a href=\"#\" data-term=\"dedup-table\">dedup table</a> that turns the repeat into a no-op: an exactly-once effect, which is still not <a href=\"#\" data-term=\"exactly-once-delivery\">exactly-once delivery</a>.",
        "The dedup table works only if it is written atomically with the effect, in one transaction. Written apart, a crash between the two writes loses or repeats the effect: <a href=\"#write-order\">scene 7</a> shows how.",
      ],
      tryThis: "Try a 1% crash rate with half of the crashes in the gap between the work and the ack, then move the crash rate and watch which bar grows.",
      figures: [
        { id: "fig-ack-lost", label: "lost per million, ack first", kind: "loss" },
        { id: "fig-ack-dup", label: "done twice per million, ack after", kind: "dup" },
        { id: "fig-ack-dedup", label: "harmed per million, dedup table", kind: "ok" },
      ],
    },
    "key-lifetime": {
      kicker: "2 · Idempotency keys",
      title: "How long must a key be remembered?",
      intro: [
        "An <a href=\"#\" data-term=\"idempotency-key\">idempotency key</a> only protects a retry while the server still remembers it, and remembering every key forever is expensive, so keys expire. The lifetime has to outlast the slowest retry a client will plausibly make — a phone that lost signal in a tunnel may retry hours later.",
        "Stripe may drop keys once they are at least 24 hours old; SQS FIFO queues deduplicate within five minutes. Below, retry delays are heavy-tailed: most retries come back within a minute or two, a few much later. A retry that arrives after its key expired looks brand new and runs again.",
      ],
      tryThis: "With a five-minute lifetime a noticeable share of retries is too late. Drag the lifetime towards a day.",
      figures: [
        { id: "fig-key-late", label: "of retries arrive after the key expired", kind: "dup" },
        { id: "fig-key-model", label: "the model’s expectation", kind: "muted" },
      ],
      takeaway: "For payments, keep keys at least a day: a retry that finds no key charges the card again. Stripe keeps each key for at least 24 hours.",
    },
    "repeats": {
      kicker: "3 · Designing for repeats",
      title: "Operations that do not mind a second copy",
      intro: [
        "The cheapest defence against duplicates is an operation that shrugs them off. “Add 10 to the balance” is hurt by every repeat. “The balance is now 1,250” is not; neither is “insert payment 8812 unless it is already there”, nor “apply version 17 if it is newer than what you have”. These are <a href=\"#\" data-term=\"idempotent\">idempotent</a>.",
        "So turn accumulating operations into set-like ones: record the fact under a natural or client-supplied id, store absolute values instead of deltas, or carry a version so an old message cannot overwrite a newer state.",
      ],
      tryThis: "Start with “Add the amount” at a 1% duplicate rate, then switch to “Set the balance”. Then raise the share of late copies and compare “Set the balance” with “Versioned update”.",
      figures: [
        { id: "fig-rep-dups", label: "duplicate effects", kind: "dup" },
        { id: "fig-rep-off", label: "final balance minus the right one", kind: "loss" },
      ],
    },
    "crash-points": {
      kicker: "4 · Exactly-once, honestly",
      title: "Every place the loop can die",
      intro: [
        "A job that reads a message, processes it and writes a result has two things to make durable: the result and its position in the input (the <a href=\"#\" data-term=\"offset\">offset</a>). Whichever it saves first, a crash between the two either repeats or skips work.",
        "Kafka’s transactions (KIP-98) save both in one atomic step, so a crash undoes both or neither. That works because the output and the offset live in the same system. The moment the loop calls something outside — a payment API, an e-mail, another database — that call is not in the transaction, and you are back to at-least-once delivery plus an idempotent effect. “Exactly-once” describes a pipeline, not the world.",
      ],
      tryThis: "Compare the first two designs: each has one dangerous point. Then look at the transactional design, and at what one outside call does to it.",
      figures: [
        { id: "fig-cp-dup", label: "crash points that repeat work", kind: "dup" },
        { id: "fig-cp-loss", label: "crash points that lose work", kind: "loss" },
      ],
    },
    "ordering": {
      kicker: "5 · Ordering",
      title: "Retries that overtake",
      intro: [
        "A <a href=\"#\" data-term=\"partition\">partition</a> keeps the order in which messages reached it, so messages that must stay in order share a key that maps to one partition. But the producer can still hand them over out of order: with several requests in flight, a failed request is retried after later ones have already landed.",
        "Two cures: allow one request in flight (slow), or number the messages so the broker refuses any that skips ahead (Kafka’s idempotent producer uses <a href=\"#\" data-term=\"sequence-number\">sequence numbers</a>).",
        "More in flight only matters up to the round trip. The first answer comes back after as many sends as fit in a round trip, and from then on each answer frees a slot for the next send: so no more requests can be unanswered at once than the round trip has slots, and raising the limit past it changes nothing.",
      ],
      tryThis: "Move “Requests in flight” one step either way and watch the share follow; then push it past the round trip and see it stop. Then set it to 1, or switch sequence numbers on.",
      figures: [
        { id: "fig-ord-share", label: "of messages consumed before an earlier one", kind: "dup" },
        { id: "fig-ord-model", label: "the model’s expectation", kind: "muted" },
      ],
    },
    "write-order": {
      kicker: "7 · Break it",
      title: "The key and the effect, written apart",
      intro: [
        "An idempotency key and the effect it guards are two writes. Whichever goes first, a crash between them leaves a lie behind: a key with no payment (the retry is told “already done”, and the money never moves) or a payment with no key (the retry charges the card again).",
        "The remedy is to make them one write: insert the key under a unique constraint and perform the effect in the same transaction of the same database, so a repeat fails on the constraint and gets the stored result. When the effect is a call to someone else, record the intent first, call with the provider’s own idempotency key, and reconcile (the <a href=\"#\" data-term=\"outbox\">outbox</a> pattern).",
      ],
      tryThis: "Five million requests with one crash in ten thousand landing in the gap: count what each order of writes does.",
      figures: [
        { id: "fig-wo-lost", label: "payments silently lost, key first", kind: "loss" },
        { id: "fig-wo-twice", label: "cards charged twice, charge first", kind: "dup" },
        { id: "fig-wo-tx", label: "harmed, one transaction", kind: "ok" },
      ],
    },
  },

  terms: [
    { id: "at-most-once", name: "At-most-once", text: "Each message is handled once or not at all. Nothing is retried, so nothing is duplicated, and whatever is lost stays lost. Good enough where a gap does not matter, such as sampled metrics." },
    { id: "at-least-once", name: "At-least-once", text: "The sender keeps retrying until it hears back, so every message gets through — and some get through twice. The receiver has to make a second copy harmless." },
    { id: "exactly-once-delivery", name: "Exactly-once delivery", text: "A promise that every message arrives one time, never zero, never two. Over a network that can drop both messages and replies, no protocol can keep it." },
    { id: "exactly-once-effect", name: "Exactly-once effect", text: "What systems really offer: at-least-once delivery plus a receiver that absorbs duplicates, so the world changes as if each message had arrived once." },
    { id: "idempotent", name: "Idempotent", text: "An operation is idempotent when doing it twice leaves the same result as doing it once. “Set x to 5” is; “add 5 to x” is not." },
    { id: "idempotency-key", name: "Idempotency key", text: "A unique id the client attaches to a request. The server stores the key with the result and answers a repeat with the stored result instead of doing the work again — for as long as it keeps the key." },
    { id: "dedup-table", name: "Dedup table", text: "A table of message ids already handled, written in the same transaction as the effect. A redelivered message whose id is there is acknowledged and skipped." },
    { id: "ack", name: "Acknowledgement", text: "The consumer telling the broker a message is done. Until it arrives the broker redelivers; after it, the broker forgets the message for good." },
    { id: "offset", name: "Offset", text: "A consumer’s position in a log. Committing an offset says “everything before this is done”; after a restart, reading resumes there." },
    { id: "fencing-token", name: "Fencing token", text: "A number that grows each time ownership of a task changes hands. The storage refuses writes that carry an older number, so an old owner that wakes up late cannot undo the new owner’s work." },
    { id: "outbox", name: "Outbox", text: "A table in the service’s own database. The outgoing message is written there in the same transaction as the business change, and a relay publishes it afterwards, at least once." },
    { id: "sequence-number", name: "Sequence number", text: "A counter a producer puts on each message. The broker accepts only the next number it expects, so a retry can neither land twice nor overtake." },
    { id: "partition", name: "Partition", text: "One ordered log inside a topic. Order holds within a partition, not across partitions; messages that must stay in order go to the same one." },
    { id: "two-generals", name: "Two Generals problem", text: "Two parties that can talk only over a channel that may lose messages can never be certain they agree: every confirmation would need a confirmation of its own." },
  ],

  guarantees: [
    "At-most-once",
    "At-least-once (the effect is harmless to repeat)",
    "At-least-once + idempotency key or dedup table",
    "Exactly-once inside the platform (transactions)",
  ],

  quiz: [
    {
      q: "Counting page clicks for a rough dashboard, where losing a few does not matter and speed does.",
      answer: 0,
      why: "Nothing bad happens if a click is missing, and retries would cost more than they are worth. Fire and forget.",
    },
    {
      q: "An order service consumes “order placed” messages and inserts the order into its own PostgreSQL database.",
      answer: 2,
      why: "Losing an order is unacceptable, so deliver at least once; a unique constraint on the order id (or a dedup table in the same transaction) turns the repeat into a no-op.",
    },
    {
      q: "A stream job reads page views from one Kafka topic, counts them per minute and writes the counts to another Kafka topic.",
      answer: 3,
      why: "Input, output and offsets all live in Kafka, so a transaction can commit the counts and the offsets together: exactly-once processing, within the platform.",
    },
    {
      q: "A warehouse feed sends the current stock level of each product (“SKU 42 now has 17”) to a shop’s cache.",
      answer: 1,
      why: "The message states an absolute value, so applying it twice changes nothing; but missing one leaves a stale number. Deliver at least once.",
    },
    {
      q: "A consumer reads payment requests from Kafka and calls a card processor’s API. A colleague says: “just turn on Kafka transactions”.",
      answer: 2,
      why: "The card processor is outside Kafka, so a transaction cannot include the call. Deliver at least once and pass the processor an idempotency key derived from the payment.",
    },
  ],

  interview: [
    {
      q: "What does a consumer that acknowledges before processing risk?",
      options: ["Losing messages when it crashes after the ack", "Processing messages twice", "Reordering messages in its partition"],
      answer: 0,
      why: "Once acknowledged, the broker forgets the message; a crash before the work is done means it is never done.",
    },
    {
      q: "Your consumer acknowledges after processing. What must the processing be?",
      options: ["Fast, so the ack is sent before a time-out", "Idempotent, because a crash before the ack redelivers the message", "Transactional with the broker"],
      answer: 1,
      why: "A crash between the effect and the ack redelivers a message whose effect already happened; the second run must change nothing.",
    },
    {
      q: "Kafka offers exactly-once semantics. Does that make sure a welcome e-mail is sent once?",
      options: ["Yes, if the producer is idempotent", "Yes, if the consumer uses read-committed", "No: it covers records and offsets inside Kafka, not calls to the outside"],
      answer: 2,
      why: "The e-mail service is not part of the transaction; an aborted and retried transaction sends the e-mail again unless the e-mail call is itself idempotent.",
    },
    {
      q: "How long should a payment API keep idempotency keys?",
      options: ["A few seconds, as long as a request time-out", "Longer than the slowest plausible retry, such as a day or more", "Forever, or the guarantee is meaningless"],
      answer: 1,
      why: "A key only helps while it is remembered. Retries are heavy-tailed, so the lifetime must cover the tail — but forever is expensive and rarely needed.",
    },
    {
      q: "Why can a producer with five requests in flight reorder messages, and what fixes it?",
      options: ["A failed request is retried after later ones landed; use one in flight or sequence numbers", "The broker sorts by arrival time; use a single partition", "Consumers read in parallel; use one consumer"],
      answer: 0,
      why: "A retry goes out behind requests that were already sent. Either send one at a time or let the broker refuse anything that skips a sequence number.",
    },
    {
      q: "A handler stores the idempotency key, then charges the card, in two separate writes. What breaks?",
      options: ["Nothing: the key prevents double charges", "A crash in between leaves a key with no charge, and the retry is told it is done", "The charge happens twice whenever the client retries"],
      answer: 1,
      why: "Key first trades double charges for silent losses. Put the key and the charge in one transaction, or record the intent and reconcile with the provider.",
    },
  ],

  who: [
    {
      name: "Kafka",
      what: "idempotent producer and transactions",
      text: "Every producer gets an id and numbers its messages per partition, so the broker drops a retried batch it already has and refuses one that skips ahead. Transactions then let a read-process-write job commit its output records and its consumer offsets together: exactly-once processing, as long as the pipeline stays inside Kafka.",
      source: "KIP-98: Exactly Once Delivery and Transactional Messaging (Apache Kafka, 2017)",
      href: "https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging",
    },
    {
      name: "Amazon SQS",
      what: "standard and FIFO queues",
      text: "Standard queues deliver every message at least once, occasionally more than once, and not necessarily in the order sent. FIFO queues keep order within a message group and drop a message whose deduplication id was already seen in the last five minutes.",
      source: "Amazon SQS Developer Guide: “Exactly-once processing in Amazon SQS” (FIFO queues)",
      href: "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-exactly-once-processing.html",
    },
    {
      name: "Stripe",
      what: "idempotency keys",
      text: "A POST request may carry an Idempotency-Key header. Stripe saves the first response under that key and returns it again for any repeat, and may remove a key once it is at least 24 hours old.",
      source: "Stripe API reference: Idempotent requests",
      href: "https://docs.stripe.com/api/idempotent_requests",
    },
    {
      name: "The Two Generals problem",
      what: "the impossibility result behind all three",
      text: "Two generals must attack together but can only send messengers through enemy ground. However many acknowledgements they trade, the last one might be lost, so neither can be sure. Networks inherit the problem — which is why real systems pair at-least-once delivery with effects that tolerate repeats.",
      source: "Akkoyunlu, Ekanadham and Huber, “Some constraints and tradeoffs in the design of network communications” (SOSP 1975); named by Gray, “Notes on Data Base Operating Systems” (1978)",
      href: "https://doi.org/10.1145/800213.806523",
    },
  ],

  // Choice values are the simulations' names; the page shows these instead.
  choiceLabels: {
    "increment": "Add the amount",
    "set": "Set the balance",
    "insert-if-new": "Insert if new",
    "versioned": "Versioned update",
    "write-then-commit": "Write, then commit",
    "commit-then-write": "Commit, then write",
    "transactional": "One transaction",
    "external-effect": "Transaction + outside call",
  },

  next: [
    {
      html: "Run the relay lab: <code>courier relay lab --scenario all</code> injects a lost publication, a lost publish ACK and a lost consumer ACK into an outbox in etcd, relayed through NATS JetStream to a deduplicating consumer, and checks each task was applied once; <code>--protocol no-dedup</code> shows what the dedup record prevents.",
      doc: "/docs/relay.md",
      docLabel: "The relay, explained (docs/relay.md)",
    },
    {
      html: "Watch exactly-once effects survive real crashes: <code>courier chaos --seed 42</code> SIGKILLs worker processes hundreds of times and crash-restarts PostgreSQL, then judges the run by the provider’s own log.",
      doc: "/docs/README.md",
      docLabel: "The chaos proof, in the README",
    },
    {
      html: "Check a run yourself: <code>courier verify --provider-log FILE</code> reads a provider’s log, prints what it found and exits non-zero on any violation of the contract.",
      doc: "/docs/provider-api.md",
      docLabel: "The provider contract the verifier checks (docs/provider-api.md)",
    },
    {
      html: "Run courier and watch it: the dashboard, its metrics and the reports.",
      doc: "/docs/operations.md",
      docLabel: "Operating courier (docs/operations.md)",
    },
    {
      html: "Replay any scene in the terminal: <code>courier sim list</code> shows every parameter, and <code>courier sim ack --seed 7</code> prints the same figures as this page with seed 7.",
    },
  ],
};
