// Package orders is the small orders API that every example serves, written
// once on net/http so each example only shows its framework's wiring.
package orders

import (
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

// Service keeps orders and payments in memory.
type Service struct {
	mu       sync.Mutex
	next     int
	orders   map[string]Order
	list     []string
	payments map[string][]Payment
}

// New returns an empty service.
func New() *Service {
	return &Service{orders: map[string]Order{}, payments: map[string][]Payment{}}
}

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
	s.mu.Lock()
	s.next++
	o := Order{ID: "ord_" + strconv.Itoa(s.next), Item: *in.Item, Quantity: *in.Quantity, CreatedAt: time.Now().UTC()}
	s.orders[o.ID] = o
	s.list = append(s.list, o.ID)
	s.mu.Unlock()
	w.Header().Set("Location", "/orders/"+o.ID)
	reply(w, http.StatusCreated, o)
}

// List handles GET /orders.
func (s *Service) List(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := make([]Order, 0, len(s.list))
	for _, id := range s.list {
		out = append(out, s.orders[id])
	}
	s.mu.Unlock()
	reply(w, http.StatusOK, out)
}

// Get handles GET /orders/{id}.
func (s *Service) Get(w http.ResponseWriter, _ *http.Request, param Param) {
	s.mu.Lock()
	o, ok := s.orders[param("id")]
	s.mu.Unlock()
	if !ok {
		problem(w, http.StatusNotFound, "Order not found", fmt.Sprintf("There is no order %q.", param("id")))
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
	id := param("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.orders[id]; !ok {
		problem(w, http.StatusNotFound, "Order not found", fmt.Sprintf("There is no order %q.", id))
		return
	}
	p := Payment{ID: fmt.Sprintf("pay_%s_%d", id, len(s.payments[id])+1), OrderID: id, Amount: *in.Amount, CreatedAt: time.Now().UTC()}
	s.payments[id] = append(s.payments[id], p)
	reply(w, http.StatusCreated, p)
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
