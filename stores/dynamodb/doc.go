// Package dynamostore is an idem store (a store.Store, package
// github.com/idemkit/idem/core/store) on Amazon DynamoDB, built on
// github.com/aws/aws-sdk-go-v2/service/dynamodb: serverless, shared by
// every instance of a service, and able to commit a handler's own
// DynamoDB writes together with the idempotency record (exactly-once
// mode).
//
// # Setup
//
//	cfg, err := config.LoadDefaultConfig(ctx)       // github.com/aws/aws-sdk-go-v2/config
//	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg),
//		dynamostore.WithTable("idempotency_keys"))
//	err = store.CreateTable(ctx)                    // development only; see "Table"
//	engine, err := idem.New(store)                  // or idem.New(store.ExactlyOnce())
//
// New sends nothing. Options: WithTable, WithPartitionKey, WithKeyPrefix,
// WithSortKey or WithSortKeyPrefix, WithAttributes, WithMaxItemSize and
// WithCompressAbove; a bad value makes New fail with an error wrapping
// ErrBadOption, which wraps idem.ErrBadOption.
//
// # Table
//
// One table; by default a partition key "pk" of type S and no sort key,
// with TTL enabled on the attribute "ttl". For infrastructure as code
// (CloudFormation; Terraform's aws_dynamodb_table is the same):
//
//	IdempotencyKeys:
//	  Type: AWS::DynamoDB::Table
//	  Properties:
//	    TableName: idempotency_keys
//	    BillingMode: PAY_PER_REQUEST
//	    AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
//	    KeySchema: [{AttributeName: pk, KeyType: HASH}]
//	    TimeToLiveSpecification: {AttributeName: ttl, Enabled: true}
//
// In a single-table design, name your keys and give the records a
// recognisable shape: WithPartitionKey("PK"), WithKeyPrefix("IDEM#") and
// WithSortKey("SK", "IDEM") store each record at PK "IDEM#<id>", SK
// "IDEM"; WithSortKeyPrefix("SK", "IDEM#") puts "IDEM#<id>" in the sort
// key as well. The TTL attribute must be the table's TTL attribute
// (Attributes.TTL; rename it if the table has another). The record id is
// 32 hex digits of a SHA-256 over the scope and the key, so any scope and
// key fit in a key attribute and records spread over partitions. No
// index is needed.
//
// Each record is one item. Its attributes (names configurable with
// WithAttributes) are: fingerprint and token (B), state (N: 1 in
// progress, 2 completed), created_at, lease_end and expires_at (N: Unix
// nanoseconds), created_s (N: Unix seconds), ttl (N: Unix seconds,
// DynamoDB's TTL), and on completed records headers and body (B: the
// result's Head and Body, bytes the engine encoded and the Store keeps
// as they are), body_coding and headers_coding (S: "gzip" when
// compressed), body_omitted (BOOL) and body_chunks (N).
//
// Items completed before results were opaque also have a status (N, an
// HTTP status), and their headers attribute holds the engine's header
// bytes: the Store reads them as before (store.LegacyHead of the two),
// so records written by an older version keep replaying. New
// completions write no status. An older version cannot read the records
// a newer one completed: roll back only with a fresh table, or after
// the records' retention.
//
// # Round trips and consistency
//
// Claim is one conditional PutItem that writes the new claim when there is
// no item, when the item has expired (expires_at ≤ now) or when it is an
// in-progress claim whose lease has ended (lease_end ≤ now); when the
// condition fails, ReturnValuesOnConditionCheckFailure ALL_OLD returns the
// blocking item in the same response, so a replay, a 409 and a 422 cost
// that one request and write nothing (a failed condition still consumes
// one write unit); a replay whose body is in chunk items (see Large
// results) reads them with one BatchGetItem more. A claim whose response
// was lost after DynamoDB applied it (a reset connection, a 5xx), and
// which the SDK therefore sent again, fails its condition on the item its
// first attempt wrote: an item in progress that holds the claim's own
// token, random per claim, which Claim reports acquired. Complete is one
// UpdateItem, or one TransactWriteItems that also writes the chunk items
// when the body needs them; Extend is one UpdateItem and Release and Evict
// one DeleteItem; each is conditioned on the claim's token (and, but for
// Evict, on the record being in progress), so a request that lost its
// claim never touches another's record. Get is one strongly consistent
// GetItem, and one BatchGetItem more for a live record whose body is in
// chunk items. A first request is two writes: one write unit each per KB
// of item (a completion with chunk items is a transaction, which costs two
// write units per KB of each of its items).
//
// # Expiry
//
// The engine's times decide, never DynamoDB's: an item past expires_at
// is taken over by Claim and reported gone by Get whether or not TTL has
// deleted it, since DynamoDB deletes expired items lazily (typically
// within days) and in no order: the expiry is read from the record's own
// item, before any of its chunk items (see Large results), which TTL may
// have deleted first. The ttl attribute only reclaims space: a completed
// record's is its expiry, an in-progress one's its lease end plus as
// long again as the lease has lasted (LeaseEnd + (LeaseEnd − CreatedAt),
// moved by Extend, which DynamoDB computes from created_s), so that a
// late Complete still finds its record, as store.Store requires. The
// Store implements no store.ExpiredDeleter.
//
// # Large results
//
// An item holds at most 400 KB, names and values (WithMaxItemSize lowers
// the bound). A completion never fails for its size: the result is
// stored in the first of these forms that fits. The first three replay
// it exactly; the last two leave the body out (BodyOmitted), as the
// engine does for bodies over its cap, and the retry does not run
// again:
//
//  1. head and body in the item as they are (bodies larger than
//     WithCompressAbove gzipped when that makes them smaller);
//  2. the body gzipped, in the item;
//  3. the body (gzipped when smaller) split into chunk items of up to
//     400 KB, written with the record in one TransactWriteItems: up to
//     about 3.5 MB, less the handler's writes (DynamoDB allows 4 MB per
//     transaction). A replay reads them with one consistent
//     BatchGetItem. TTL removes chunks at the record's expiry, also when
//     the record was deleted or taken over before;
//  4. the head alone;
//  5. the head gzipped, when that makes it smaller. The head is never
//     dropped: the engine keeps it within 64 KiB (store.MaxHead), which
//     an item always has room for, so this form is written even when it
//     is over WithMaxItemSize's bound.
//
// The Store estimates the item's size and, should DynamoDB still refuse
// the item, sends the completion again in the next form.
//
// # Exactly-once
//
// Store.ExactlyOnce returns a view (store.TxBeginner) under which a
// handler's own DynamoDB writes commit with the record's completion in one
// TransactWriteItems, so that a crash or a lost claim can never leave one
// without the other:
//
//	engine, err := idem.New(store.ExactlyOnce())
//	func pay(w http.ResponseWriter, r *http.Request) {
//		tx, _ := dynamostore.Tx(r.Context())
//		err := tx.Put(types.Put{TableName: aws.String("payments"), Item: item,
//			ConditionExpression: aws.String("attribute_not_exists(id)")})
//		// answer as usual: the writes are sent when the response is stored
//	}
//
// Tx collects Put, Update, Delete and ConditionCheck items; nothing is
// sent until the engine stores the response (when the handler returns, or
// when a response starts streaming: a streaming handler collects its
// writes first). Then the items and the token-conditioned completion go
// in one TransactWriteItems, with a ClientRequestToken derived from the
// claim so that the SDK's retries of it are idempotent. When a condition
// of the handler's items fails (an error wrapping ErrTxConflict), or the
// transaction fails otherwise, nothing is written: the engine answers 503
// (commit-failed) and releases the key, and the client's retry runs the
// handler again. When the claim was lost, the completion's condition
// fails and nothing is written either. A transaction cancelled for a
// TransactionConflict (a write to one of its items at the same moment,
// such as the heartbeat's) is sent again, up to three times. A 5xx, a 429, a panic or a hijack
// drops the collected items. The claim is kept alive by the engine's
// heartbeat while the handler runs, as in plain mode.
//
// Limits, which DynamoDB checks at commit: at most 100 items per
// transaction, one of them the record, so a handler collects at most
// MaxTxItems (99; the writer returns ErrTxFull past it), fewer when a
// large body needs chunk items; 4 MB in all; no two items on one item
// of a table, nor an item on the idempotency record. Transactional writes
// cost two write units per KB. The handler reads outside the transaction
// (there is no read-your-writes): guard what it read with a
// ConditionCheck or a condition on its writes.
//
// # Errors and throttling
//
// Errors from DynamoDB are returned wrapped, the operation named; test
// for the SDK's types with errors.As. Throttling
// (ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded) and other transient errors are retried by the
// SDK's retryer (three attempts by default) within the engine's store
// timeout (WithStoreTimeout, 2 s); what still fails is a store failure:
// the engine answers 503 with Retry-After (or runs the handler unprotected
// under WithFailOpen), and a completion that fails after the handler ran
// is retried in the background. On-demand capacity avoids most
// throttling; keep the retryer's total time below the store timeout.
//
// # Time and global tables
//
// DynamoDB tells no time, so the Store implements no store.Clock:
// instances compare leases on their own clocks, which NTP keeps within
// far less than a heartbeat. Conditional writes are atomic within one
// region only: in a global table (with the default, eventually consistent
// replication) two regions can both claim one key, and the last writer
// wins. Route a key's retries to one region, or use a global table with
// multi-Region strong consistency.
//
// # Tests
//
// The tests run against the endpoint in IDEM_TEST_DYNAMODB_URL (default
// http://127.0.0.1:8000), skipping when nothing listens there (failing
// when CI is set). scripts/dynalite-start starts dynalite, an in-memory
// emulator (npm package dynalite@4), behind scripts/dynalite-tx.js, which
// adds what dynalite lacks: TransactWriteItems, ALL_OLD on a failed
// condition, UpdateTimeToLive. It runs every call one at a time, so it
// cannot show throttling, the isolation of real concurrent transactions,
// TTL deletion or global tables.
package dynamostore
