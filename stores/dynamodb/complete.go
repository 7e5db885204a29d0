package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	idem "github.com/idemkit/idem/core"
)

// complete completes the record with resp, together with the handler's
// writes when there are any, trying the encoding levels in order until
// DynamoDB takes the item.
func (s *Store) complete(ctx context.Context, op, scope, key, token string, resp *idem.Response, expiresAt time.Time, handler []types.TransactWriteItem) error {
	lim := s.limits(token, handler)
	for level := levelRaw; level < levelCount; level++ {
		e := encodeResponse(resp, lim, level)
		level = e.level
		u, err := s.completeUpdate(scope, key, token, resp, &e, expiresAt)
		if err != nil {
			return fmt.Errorf("dynamostore: %s: %w", op, err)
		}
		if len(handler) == 0 && len(e.chunks) == 0 {
			_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
				ConditionExpression: u.ConditionExpression, ExpressionAttributeNames: u.ExpressionAttributeNames,
				ExpressionAttributeValues: u.ExpressionAttributeValues,
			})
			if tooLarge(err) {
				continue
			}
			return s.held(op, err)
		}
		items := append(handler[:len(handler):len(handler)], s.chunkPuts(u.Key, token, &e, expiresAt)...)
		items = append(items, types.TransactWriteItem{Update: u})
		err = s.transact(ctx, items, u.Key, token, expiresAt, level)
		if err == nil {
			return nil
		}
		if tooLarge(err) || ownTooLarge(err, len(handler), len(items)) {
			continue
		}
		return commitError(op, err, len(handler), len(items))
	}
	return fmt.Errorf("dynamostore: %s: the record does not fit in an item even without its response's headers and body", op)
}

// maxConflicts bounds how often a completion's TransactWriteItems is sent
// again after DynamoDB cancelled it for a TransactionConflict: a write to
// one of its items in flight at the same moment (the heartbeat's Extend
// of the record, or another request's write to a handler item).
const maxConflicts = 3

// transact sends items in one TransactWriteItems, again after a
// TransactionConflict (a cancelled transaction wrote nothing, so each
// attempt has a client token of its own).
func (s *Store) transact(ctx context.Context, items []types.TransactWriteItem, rec map[string]types.AttributeValue, token string, expiresAt time.Time, level int) error {
	for attempt := 0; ; attempt++ {
		_, err := s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems:      items,
			ClientRequestToken: new(s.requestToken(rec, token, expiresAt, level*maxConflicts+attempt)),
		})
		if err == nil || attempt+1 == maxConflicts || !conflicted(err, len(items)) {
			return err
		}
		if err := sleep(ctx, time.Duration(attempt+1)*20*time.Millisecond); err != nil {
			return err
		}
	}
}

// conflicted reports a transaction of n items cancelled for a
// TransactionConflict and no failed condition.
func conflicted(err error, n int) bool {
	rs := reasons(err, n)
	found := false
	for _, r := range rs {
		switch code(r) {
		case "TransactionConflict":
			found = true
		case "None", "":
		default:
			return false
		}
	}
	return found
}

// tooLarge reports DynamoDB's refusal of an item over 400 KB, or of a
// transaction over 4 MB.
func tooLarge(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ValidationException" {
		return false
	}
	m := ae.ErrorMessage()
	return strings.Contains(m, "exceeded the maximum allowed size") || strings.Contains(m, "4 MB")
}

// completeUpdate builds the token-conditioned update that completes the
// record with resp, encoded as e.
func (s *Store) completeUpdate(scope, key, token string, resp *idem.Response, e *encoded, expiresAt time.Time) (*types.Update, error) {
	exp, err := nanos(expiresAt)
	if err != nil {
		return nil, err
	}
	set := []string{"#st = :done", "#sc = :sc", "#ex = :ex", "#ttl = :ttl"}
	ph := []string{"#st", "#sc", "#ex", "#ttl", "#le", "#tok"}
	vals := map[string]types.AttributeValue{
		":done": attrN(int64(idem.StateCompleted)), ":ip": attrN(int64(idem.StateInProgress)),
		":sc": attrN(int64(resp.Status)), ":ex": attrN(exp), ":ttl": attrN(ceilSec(expiresAt)),
		":tok": attrB([]byte(token)),
	}
	add := func(placeholder, value string, v types.AttributeValue) {
		set = append(set, placeholder+" = "+value)
		ph = append(ph, placeholder)
		vals[value] = v
	}
	if len(e.header) > 0 {
		add("#h", ":h", attrB(e.header))
	}
	if len(e.body) > 0 {
		add("#b", ":b", attrB(e.body))
	}
	if len(e.chunks) > 0 {
		add("#bk", ":bk", attrN(int64(len(e.chunks))))
	}
	if e.headerGzip {
		add("#hc", ":hc", attrS(codingGzip))
	}
	if e.bodyGzip {
		add("#bc", ":bc", attrS(codingGzip))
	}
	if e.omitted {
		add("#bo", ":bo", &types.AttributeValueMemberBOOL{Value: true})
	}
	return &types.Update{
		TableName:                 &s.table,
		Key:                       s.Key(scope, key),
		UpdateExpression:          new("SET " + strings.Join(set, ", ") + " REMOVE #le"),
		ConditionExpression:       new(heldCondition),
		ExpressionAttributeNames:  s.names(ph...),
		ExpressionAttributeValues: vals,
	}, nil
}
