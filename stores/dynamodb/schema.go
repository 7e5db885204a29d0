package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// tableAdmin is what CreateTable needs of the Store's client.
type tableAdmin interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
}

// CreateTable creates the Store's table when it does not exist, with
// on-demand capacity (PAY_PER_REQUEST), waits until it is ACTIVE (within
// ctx), and enables TTL on the TTL attribute unless it is enabled. An
// existing table is left as it is apart from its TTL; its key schema is
// not checked. It is meant for development and tests: in production,
// create the table with your infrastructure code as the package docs
// describe ("Table"). The client must have CreateTable, DescribeTable,
// UpdateTimeToLive and DescribeTimeToLive (a *dynamodb.Client has).
func (s *Store) CreateTable(ctx context.Context) error {
	admin, ok := s.client.(tableAdmin)
	if !ok {
		return fmt.Errorf("dynamostore: create table: the client, a %T, cannot create tables", s.client)
	}
	defs := []types.AttributeDefinition{{AttributeName: &s.pk, AttributeType: types.ScalarAttributeTypeS}}
	keys := []types.KeySchemaElement{{AttributeName: &s.pk, KeyType: types.KeyTypeHash}}
	if s.sk != "" {
		defs = append(defs, types.AttributeDefinition{AttributeName: &s.sk, AttributeType: types.ScalarAttributeTypeS})
		keys = append(keys, types.KeySchemaElement{AttributeName: &s.sk, KeyType: types.KeyTypeRange})
	}
	_, err := admin.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &s.table, AttributeDefinitions: defs, KeySchema: keys,
		BillingMode: types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: create table %s: %w", s.table, err)
	}
	if err := waitActive(ctx, admin, s.table); err != nil {
		return err
	}
	ttl, err := admin.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &s.table})
	if err != nil {
		return fmt.Errorf("dynamostore: create table %s: describe TTL: %w", s.table, err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && d.AttributeName != nil && *d.AttributeName == s.attrs.TTL &&
		(d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	}
	_, err = admin.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &s.table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: &s.attrs.TTL, Enabled: new(true)},
	})
	if err != nil {
		return fmt.Errorf("dynamostore: create table %s: enable TTL on %q: %w", s.table, s.attrs.TTL, err)
	}
	return nil
}

// waitActive polls DescribeTable until the table is ACTIVE, every 100 ms
// at first and at most every 2 s, within ctx.
func waitActive(ctx context.Context, admin tableAdmin, table string) error {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		out, err := admin.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
		if err != nil {
			return fmt.Errorf("dynamostore: create table %s: describe: %w", table, err)
		}
		if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("dynamostore: create table %s: waiting for ACTIVE: %w", table, ctx.Err())
		case <-t.C:
		}
	}
}
