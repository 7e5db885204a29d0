// Command natsconsumer processes each message of a NATS JetStream stream
// once, through idem's Engine.Do: its side effect, a row in a PostgreSQL
// table of payments, happens once however often the message arrives.
//
//	go run ./examples/natsconsumer -store postgres -exactly-once   # or -store redis
//	nats pub payments '{"account":"acct-7","amount_cents":1250}' -H Nats-Msg-Id:pay-1
//
// The key is the Nats-Msg-Id header ("id:" + the id), or without one the
// message's place in the stream ("seq:" + stream + ":" + sequence). JetStream
// drops a republished Msg-Id itself, but only at publish time and within
// the stream's duplicate window (2 minutes by default); idem also covers a
// publisher retrying after the window and a message delivered again after
// a lost ack, a crash or an AckWait timeout. Such a message is acked with
// the stored result instead of being processed again.
//
// Success, a replay and a Final error (a payload that is not a payment)
// are acked; a *RetryError (the key is claimed by a run still going, or by
// a crashed one until its lease ends, or the store failed) is Nak'ed with
// its delay; ErrMismatch (the Msg-Id came with another payload) is
// terminated. With -exactly-once the row is written through pgxstore.Tx
// and commits with the record in one transaction; with Redis they are two
// writes, and a crash between them makes the redelivery insert again.
//
// It prints one line to stdout once it consumes and logs one line per
// message to stderr. SIGINT and SIGTERM stop fetching, finish the message
// in hand and close the engine.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/app"
	pgxstore "github.com/idemkit/idem/stores/pgx"
)

type config struct {
	natsURL, stream, subject, consumer string
	payments                           string // table of the side effect
	ackWait, lease                     time.Duration
	log                                app.LogFlags
	store                              app.StoreFlags

	// Test-only faults.
	dropAcks         int
	workDelay        time.Duration
	crashAfterInsert bool
}

func parse() config {
	var c config
	fs := flag.NewFlagSet("natsconsumer", flag.ExitOnError)
	fs.StringVar(&c.natsURL, "nats-url", envOr("IDEM_NATS_URL", nats.DefaultURL), "NATS server URL")
	fs.StringVar(&c.stream, "stream", "PAYMENTS", "JetStream stream (created on -subject when missing)")
	fs.StringVar(&c.subject, "subject", "payments", "subject to consume")
	fs.StringVar(&c.consumer, "consumer", "payments-worker", "durable consumer name; it also scopes the keys")
	fs.StringVar(&c.payments, "payments-table", "payments", "PostgreSQL table of the payments made (on -postgres-url)")
	fs.DurationVar(&c.ackWait, "ack-wait", 30*time.Second, "the consumer's AckWait: how long JetStream waits for an ack before redelivering")
	fs.DurationVar(&c.lease, "lease", 0, "how long a crashed consumer's claim blocks redeliveries (default: the engine's, 15s with the heartbeat)")
	fs.IntVar(&c.dropAcks, "drop-acks", 0, "test only: skip the acks of the first N messages processed")
	fs.DurationVar(&c.workDelay, "work-delay", 0, "test only: sleep this long in each payment, before its INSERT")
	fs.BoolVar(&c.crashAfterInsert, "crash-after-insert", false, "test only: SIGKILL itself after the first payment's INSERT, before the record is stored")
	c.log.Register(fs)
	c.store.Register(fs, "natsconsumer")
	fs.Parse(os.Args[1:])
	switch {
	case fs.NArg() > 0:
		app.Fatal(fmt.Errorf("unexpected arguments: %q", fs.Args()), true)
	case c.ackWait < time.Second || c.lease < 0 || c.dropAcks < 0 || c.workDelay < 0:
		app.Fatal(errors.New("-ack-wait must be at least 1s; -lease, -drop-acks and -work-delay not negative"), true)
	}
	if err := c.store.Validate(); err != nil {
		app.Fatal(err, true)
	}
	return c
}

func main() {
	c := parse()
	c.log.Install()
	log := slog.Default()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	store, closeStore := c.store.MustOpen(ctx)
	defer closeStore()
	opts := []idem.Option{
		// Per-message lines are ours; the engine's log shows only trouble.
		idem.WithLogger(log.With("source", "idem")),
	}
	if c.lease > 0 {
		opts = append(opts, idem.WithLease(c.lease))
	}
	engine, err := idem.New(store, append(opts, c.store.Engine()...)...)
	if err != nil {
		app.Fatal(err, true)
	}

	pool, err := pgxpool.New(ctx, c.store.PostgresURL)
	if err != nil {
		app.Fatal(fmt.Errorf("-postgres-url: %w", err), false)
	}
	defer pool.Close()
	w, err := newWorker(ctx, c, engine, pool, log)
	if err != nil {
		app.Fatal(err, false)
	}

	nc, err := nats.Connect(c.natsURL, nats.Name("idem-natsconsumer"))
	if err != nil {
		app.Fatal(fmt.Errorf("-nats-url: %w", err), false)
	}
	defer nc.Close()
	msgs, err := subscribe(ctx, nc, c)
	if err != nil {
		app.Fatal(err, false)
	}
	mode := c.store.Kind
	if c.store.ExactlyOnce {
		mode += ", exactly-once"
	}
	fmt.Printf("consuming %s from stream %s as %s on %s\n", c.subject, c.stream, c.consumer, mode)

	for ctx.Err() == nil {
		msg, err := msgs.Next(jetstream.NextContext(ctx))
		switch {
		case err == nil:
			w.handle(msg)
		case ctx.Err() != nil: // SIGINT or SIGTERM: fetch no more
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			app.Fatal(fmt.Errorf("consuming: %w", err), false) // the consumer or the connection is gone
		default:
			log.Warn("fetching", "err", err) // a missed heartbeat: the iterator goes on
		}
	}

	msgs.Stop() // buffered messages are redelivered after AckWait
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := engine.Close(sctx); err != nil { // lands completions still pending
		log.Error("closing the engine", "err", err)
	}
	nc.Flush() // send the last acks before Close
}

// subscribe makes sure the stream and the durable consumer exist and
// starts pulling from it.
func subscribe(ctx context.Context, nc *nats.Conn, c config) (jetstream.MessagesContext, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if _, err := js.Stream(ctx, c.stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: c.stream, Subjects: []string{c.subject}})
		if err != nil {
			return nil, fmt.Errorf("creating stream %s: %w", c.stream, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("stream %s: %w", c.stream, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, c.stream, jetstream.ConsumerConfig{
		Durable:       c.consumer,
		FilterSubject: c.subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.ackWait,
		// MaxDeliver stays unlimited: a message Nak'ed while another
		// consumer holds its key counts as a delivery.
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", c.consumer, err)
	}
	// Messages pulled ahead wait in a buffer with their AckWait running:
	// keep the buffer small for a consumer that handles one at a time.
	return cons.Messages(jetstream.PullMaxMessages(16))
}

// worker handles one message at a time.
type worker struct {
	engine  *idem.Engine
	pool    *pgxpool.Pool
	name    string // the durable consumer's: Op.Name
	insert  string
	log     *slog.Logger
	ackWait time.Duration

	dropAcks         int
	workDelay        time.Duration
	crashAfterInsert bool
}

// newWorker creates the payments table when it does not exist.
func newWorker(ctx context.Context, c config, engine *idem.Engine, pool *pgxpool.Pool, log *slog.Logger) (*worker, error) {
	table := pgx.Identifier{c.payments}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+` (
		id           bigserial PRIMARY KEY,
		msg_key      text NOT NULL,
		account      text NOT NULL,
		amount_cents bigint NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return nil, fmt.Errorf("creating the payments table: %w", err)
	}
	return &worker{
		engine: engine, pool: pool, name: c.consumer, log: log, ackWait: c.ackWait,
		insert:   "INSERT INTO " + table + " (msg_key, account, amount_cents) VALUES ($1, $2, $3) RETURNING id",
		dropAcks: c.dropAcks, workDelay: c.workDelay, crashAfterInsert: c.crashAfterInsert,
	}, nil
}

// payment is a message's payload; receipt is the result Do stores and
// replays.
type (
	payment struct {
		Account     string `json:"account"`
		AmountCents int64  `json:"amount_cents"`
	}
	receipt struct {
		PaymentID int64 `json:"payment_id"`
	}
)

// handle processes msg through Do and acks, Naks or terminates it by the
// result.
func (w *worker) handle(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Error("not a JetStream message", "subject", msg.Subject(), "err", err)
		return
	}
	key := messageKey(msg, meta)
	op := idem.Op{
		Kind:        "nats",
		Name:        w.name,
		Key:         key,
		Fingerprint: idem.Fingerprint("nats", msg.Subject(), msg.Data()),
	}
	// The message in hand finishes even after SIGTERM: no cancellation.
	stop := keepInProgress(msg, w.ackWait/3)
	r, replayed, err := idem.DoJSON(context.Background(), w.engine, op, func(ctx context.Context) (receipt, error) {
		return w.pay(ctx, key, msg.Data())
	})
	stop()

	log := w.log.With("key_hash", idem.KeyHash(key), "stream_seq", meta.Sequence.Stream,
		"delivered", meta.NumDelivered, "replayed", replayed)
	var final *idem.FinalError
	var retry *idem.RetryError
	switch {
	case err == nil:
		w.ack(msg, replayed, log.With("outcome", "paid", "payment_id", r.PaymentID))
	case errors.As(err, &final): // a processed message, whose answer is no
		w.ack(msg, replayed, log.With("outcome", "rejected", "reason", final.Err))
	case errors.As(err, &retry): // in flight elsewhere, or the store failed
		msg.NakWithDelay(retry.After)
		log.Info("message", "outcome", "retry", "action", "nak", "after", retry.After, "err", err)
	case errors.Is(err, idem.ErrMismatch):
		msg.Term()
		log.Warn("message", "outcome", "mismatch", "action", "term",
			"err", "the key was already used with another payload")
	default: // pay failed; Do released the key
		msg.NakWithDelay(time.Second)
		log.Warn("message", "outcome", "failed", "action", "nak", "err", err)
	}
}

// ack acks a processed message. A lost ack is harmless: the redelivery
// is replayed, so Ack need not wait for the server (DoubleAck).
func (w *worker) ack(msg jetstream.Msg, replayed bool, log *slog.Logger) {
	if w.dropAcks > 0 && !replayed {
		w.dropAcks--
		log.Info("message", "action", "ack dropped (-drop-acks)")
		return
	}
	msg.Ack()
	log.Info("message", "action", "ack")
}

// pay makes the payment: one row in the payments table, written in the
// engine's transaction when the store is in exactly-once mode.
func (w *worker) pay(ctx context.Context, key string, data []byte) (receipt, error) {
	var p payment
	if err := json.Unmarshal(data, &p); err != nil || p.Account == "" || p.AmountCents <= 0 {
		// Redelivering a bad payload cannot help: settle it.
		return receipt{}, idem.Final(fmt.Errorf("not a payment: %.100q", data))
	}
	time.Sleep(w.workDelay)
	var db interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	} = w.pool
	if tx, ok := pgxstore.Tx(ctx); ok {
		db = tx // commits with the record, or not at all
	}
	var r receipt
	err := db.QueryRow(ctx, w.insert, key, p.Account, p.AmountCents).Scan(&r.PaymentID)
	if err == nil && w.crashAfterInsert {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	return r, err
}

// messageKey is msg's idempotency key: "id:" and its Nats-Msg-Id, or
// else "seq:" and its place in the stream, hashed when it is not a valid
// key. The prefixes keep the two kinds apart.
func messageKey(msg jetstream.Msg, meta *jetstream.MsgMetadata) string {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return idem.KeyFor("id:" + id)
	}
	return idem.KeyFor(fmt.Sprintf("seq:%s:%d", meta.Stream, meta.Sequence.Stream))
}

// keepInProgress tells JetStream every interval that msg is still being
// worked on, so a long payment is not redelivered meanwhile; the engine's
// heartbeat keeps the key's claim alive the same way. It returns the
// function that stops it.
func keepInProgress(msg jetstream.Msg, every time.Duration) (stop func()) {
	t := time.NewTicker(every)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-t.C:
				msg.InProgress()
			case <-done:
				return
			}
		}
	}()
	return func() { t.Stop(); close(done) }
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
