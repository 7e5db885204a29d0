package dynamostore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	idem "github.com/idemkit/idem/core"
	dynamostore "github.com/idemkit/idem/stores/dynamodb"
)

// The common setup: a client from the default AWS configuration, the
// store on its table, an engine.
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx) // region and credentials from the environment
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), dynamostore.WithTable("idempotency_keys"))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil { // in production the table comes from your infrastructure code
		log.Fatal(err)
	}
	engine, err := idem.New(store)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	log.Fatal(http.ListenAndServe(":8080", engine.Middleware()(mux)))
}

// A single-table design: records at PK "IDEM#<id>", SK "IDEM", in the
// application's own table, whose TTL attribute is "expires".
func ExampleWithSortKey() {
	client := dynamodb.New(dynamodb.Options{Region: "us-east-1"})
	store, err := dynamostore.New(client,
		dynamostore.WithTable("app"),
		dynamostore.WithPartitionKey("PK"),
		dynamostore.WithKeyPrefix("IDEM#"),
		dynamostore.WithSortKey("SK", "IDEM"),
		dynamostore.WithAttributes(dynamostore.Attributes{TTL: "expires"}),
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.Table())
	// Output: app
}

// Exactly-once: the payment and the idempotency record are written in
// one TransactWriteItems, or neither is.
func ExampleTx() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg))
	if err != nil {
		log.Fatal(err)
	}
	engine, err := idem.New(store.ExactlyOnce())
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /payments", engine.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tx, _ := dynamostore.Tx(r.Context())
		err := tx.Put(types.Put{
			TableName: aws.String("payments"),
			Item: map[string]types.AttributeValue{
				"id":      &types.AttributeValueMemberS{Value: r.Header.Get("Idempotency-Key")},
				"request": &types.AttributeValueMemberB{Value: body},
			},
			ConditionExpression: aws.String("attribute_not_exists(id)"),
		})
		if err != nil { // ErrTxFull past 99 writes
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// The engine sends the Put with the stored response; if its
		// condition fails the client gets 503 and its retry runs again.
		w.WriteHeader(http.StatusCreated)
	})))
	log.Fatal(http.ListenAndServe(":8080", nil))
}
