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
	"github.com/idemkit/idem/core/store"
)

// complete completes the record h holds with c, together with the
// handler's writes when there are any, trying the encoding levels in
// order until DynamoDB takes the item.
func (s *Store) complete(ctx context.Context, op string, h store.Hold, c *store.Completion, handler []types.TransactWriteItem) error {
	if len(c.Result.Head) == 0 {
		return fmt.Errorf("dynamostore: %s: the result has no head", op)
	}
	lim := s.limits(h.Token, handler)
	for level := levelRaw; level < levelCount; level++ {
		e := encodeResult(&c.Result, lim, level)
		level = e.level
		u, err := s.completeUpdate(h, &e, c.ExpiresAt)
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
		items := append(handler[:len(handler):len(handler)], s.chunkPuts(u.Key, h.Token, &e, c.ExpiresAt)...)
		items = append(items, types.TransactWriteItem{Update: u})
		err = s.transact(ctx, items, u.Key, h.Token, c.ExpiresAt, level)
		if err == nil {
			return nil
		}
		if tooLarge(err) || ownTooLarge(err, len(handler), len(items)) {
			continue
		}
		return commitError(op, err, len(handler), len(items))
	}
	return fmt.Errorf("dynamostore: %s: the record does not fit in an item even with its result's head alone, gzipped", op)
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
// record h holds with a result encoded as e. It writes no status: an
// item with one was written before results were opaque (see
// decodeRecord), and the update removes any, so that the head is never
// read as legacy header bytes.
func (s *Store) completeUpdate(h store.Hold, e *encoded, expiresAt time.Time) (*types.Update, error) {
	exp, err := nanos(expiresAt)
	if err != nil {
		return nil, err
	}
	set := []string{"#st = :done", "#ex = :ex", "#ttl = :ttl", "#h = :h"}
	ph := []string{"#st", "#ex", "#ttl", "#h", "#le", "#sc", "#tok"}
	vals := map[string]types.AttributeValue{
		":done": attrN(int64(store.Completed)), ":ip": attrN(int64(store.InProgress)),
		":ex": attrN(exp), ":ttl": attrN(ceilSec(expiresAt)), ":h": attrB(e.head),
		":tok": attrB([]byte(h.Token)),
	}
	add := func(placeholder, value string, v types.AttributeValue) {
		set = append(set, placeholder+" = "+value)
		ph = append(ph, placeholder)
		vals[value] = v
	}
	if len(e.body) > 0 {
		add("#b", ":b", attrB(e.body))
	}
	if len(e.chunks) > 0 {
		add("#bk", ":bk", attrN(int64(len(e.chunks))))
	}
	if e.headGzip {
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
		Key:                       s.Key(h.Scope, h.Key),
		UpdateExpression:          new("SET " + strings.Join(set, ", ") + " REMOVE #le, #sc"),
		ConditionExpression:       new(heldCondition),
		ExpressionAttributeNames:  s.names(ph...),
		ExpressionAttributeValues: vals,
	}, nil
}
