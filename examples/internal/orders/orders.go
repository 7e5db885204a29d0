// Package orders is the small orders API that every example serves, written
// once on net/http so each example only shows its framework's wiring.
package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Order is a created order.
type Order struct {
	ID        string    `json:"id"`
	Item      string    `json:"item"`
	Quantity  int       `json:"quantity"`
	CreatedAt time.Time `json:"created_at"`
}

// Payment is a payment against an order.
type Payment struct {
	ID        string    `json:"id"`
	OrderID   string    `json:"order_id"`
	Amount    float64   `json:"amount"`
	CreatedAt time.Time `json:"created_at"`
}

// Repo keeps orders and payments. Its methods take the request's context,
// which in exactly-once mode carries the request's transaction.
type Repo interface {
	CreateOrder(ctx context.Context, item string, quantity int, now time.Time) (Order, error)
	ListOrders(ctx context.Context) ([]Order, error)
	// GetOrder returns the order, or ErrNotFound.
	GetOrder(ctx context.Context, id string) (Order, error)
	// AddPayment records a payment against an order, or returns
	// ErrNotFound when there is no such order.
	AddPayment(ctx context.Context, orderID string, amount float64, now time.Time) (Payment, error)
}

// ErrNotFound is returned by a Repo for an order it does not have.
var ErrNotFound = errors.New("orders: no such order")

// Service serves the orders API on a Repo.
type Service struct{ repo Repo }

// New returns a service that keeps its orders in memory.
func New() *Service { return NewWith(NewMemory()) }

// NewWith returns a service on repo.
func NewWith(repo Repo) *Service { return &Service{repo: repo} }

// Param returns a path parameter of the request by name; each framework
// has its own (r.PathValue, chi.URLParam, c.Param).
type Param func(name string) string

// Create handles POST /orders: {"item": string, "quantity": int > 0}.
func (s *Service) Create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Item     *string `json:"item"`
		Quantity *int    `json:"quantity"`
	}
	if err := decode(r, &in); err != nil {
		problem(w, http.StatusBadRequest, "Invalid order", err.Error())
		return
	}
	switch {
	case in.Item == nil || *in.Item == "":
		problem(w, http.StatusBadRequest, "Invalid order", `"item" must be a non-empty string`)
		return
	case in.Quantity == nil || *in.Quantity <= 0:
		problem(w, http.StatusBadRequest, "Invalid order", `"quantity" must be a whole number greater than 0`)
		return
	}
	o, err := s.repo.CreateOrder(r.Context(), *in.Item, *in.Quantity, time.Now().UTC())
	if err != nil {
		failed(w, err)
		return
	}
	w.Header().Set("Location", "/orders/"+o.ID)
	reply(w, http.StatusCreated, o)
}

// List handles GET /orders.
func (s *Service) List(w http.ResponseWriter, r *http.Request) {
	out, err := s.repo.ListOrders(r.Context())
	if err != nil {
		failed(w, err)
		return
	}
	reply(w, http.StatusOK, out)
}

// Get handles GET /orders/{id}.
func (s *Service) Get(w http.ResponseWriter, r *http.Request, param Param) {
	o, err := s.repo.GetOrder(r.Context(), param("id"))
	if err != nil {
		failed(w, err)
		return
	}
	reply(w, http.StatusOK, o)
}

// Pay handles POST /orders/{id}/payments: {"amount": number > 0}.
func (s *Service) Pay(w http.ResponseWriter, r *http.Request, param Param) {
	var in struct {
		Amount *float64 `json:"amount"`
	}
	if err := decode(r, &in); err != nil {
		problem(w, http.StatusBadRequest, "Invalid payment", err.Error())
		return
	}
	if in.Amount == nil || *in.Amount <= 0 {
		problem(w, http.StatusBadRequest, "Invalid payment", `"amount" must be a number greater than 0`)
		return
	}
	p, err := s.repo.AddPayment(r.Context(), param("id"), *in.Amount, time.Now().UTC())
	if err != nil {
		failed(w, err)
		return
	}
	reply(w, http.StatusCreated, p)
}

// failed answers a Repo's error: 404 for ErrNotFound, else 503, which
// releases the key (and rolls the transaction back in exactly-once mode).
func failed(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrNotFound) {
		problem(w, http.StatusNotFound, "Order not found", "There is no such order.")
		return
	}
	problem(w, http.StatusServiceUnavailable, "Orders unavailable", err.Error())
}

// Memory is a Repo in process memory.
type Memory struct {
	mu       sync.Mutex
	next     int
	orders   map[string]Order
	list     []string
	payments map[string][]Payment
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{orders: map[string]Order{}, payments: map[string][]Payment{}}
}

func (m *Memory) CreateOrder(_ context.Context, item string, quantity int, now time.Time) (Order, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	o := Order{ID: "ord_" + strconv.Itoa(m.next), Item: item, Quantity: quantity, CreatedAt: now}
	m.orders[o.ID] = o
	m.list = append(m.list, o.ID)
	return o, nil
}

func (m *Memory) ListOrders(context.Context) ([]Order, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Order, 0, len(m.list))
	for _, id := range m.list {
		out = append(out, m.orders[id])
	}
	return out, nil
}

func (m *Memory) GetOrder(_ context.Context, id string) (Order, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.orders[id]
	if !ok {
		return Order{}, ErrNotFound
	}
	return o, nil
}

func (m *Memory) AddPayment(_ context.Context, orderID string, amount float64, now time.Time) (Payment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.orders[orderID]; !ok {
		return Payment{}, ErrNotFound
	}
	p := Payment{ID: fmt.Sprintf("pay_%s_%d", orderID, len(m.payments[orderID])+1), OrderID: orderID, Amount: amount, CreatedAt: now}
	m.payments[orderID] = append(m.payments[orderID], p)
	return p, nil
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return errors.New("the body is empty; send a JSON object")
		case errors.As(err, &syn):
			return fmt.Errorf("the body is not valid JSON (at byte %d)", syn.Offset)
		case errors.As(err, &typ):
			return fmt.Errorf("%q must be a %s", typ.Field, typ.Type)
		}
		return err
	}
	if dec.More() {
		return errors.New("the body holds more than one JSON value")
	}
	return nil
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func problem(w http.ResponseWriter, code int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": code, "detail": detail})
}
