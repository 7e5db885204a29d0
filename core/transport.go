package idem

// This file is what an adapter on an HTTP stack other than net/http
// (Fiber, fasthttp) needs beside Start and Finish to behave as the
// net/http middleware does: the request's fingerprint, and the options it
// cannot apply; Policy.Start and Call.Finish are the rest.

// FingerprintRequest returns the fingerprint the net/http middleware gives
// a request with method, target (its path and query as sent) and body
// under p: Fingerprint(method, target, body), or with WithJSONFingerprint
// that of the body's canonical JSON, with an error wrapping
// ErrInvalidJSON when the body is not JSON.
func (p *Policy) FingerprintRequest(method, target string, body []byte) (string, error) {
	jc := p.h.jsonFP
	if jc == nil || len(body) == 0 {
		return Fingerprint(method, target, body), nil
	}
	v, jp, err := parseJSON(body)
	if err != nil {
		return "", err
	}
	defer jp.release()
	return Fingerprint(method, target, jc.canonical(nil, &v)), nil
}

// RequestOptions returns the names of the options p was built with that
// work on a *http.Request or on the net/http middleware's body handling:
// WithNamespace, WithFingerprint, WithKeyField and RouteFunc. An adapter
// on another HTTP stack cannot apply them, so it refuses them (rather
// than ignore them) and takes its own equivalents.
func (p *Policy) RequestOptions() []string {
	var names []string
	h := p.h
	if h.namespace != nil {
		names = append(names, "WithNamespace")
	}
	if h.fingerprint != nil {
		names = append(names, "WithFingerprint")
	}
	if h.keyField != "" {
		names = append(names, "WithKeyField")
	}
	if h.routeFunc != nil {
		names = append(names, "RouteFunc")
	}
	return names
}

// MaxRequestBody returns the largest request body p reads
// (WithMaxRequestBody); a larger one gets 413.
func (p *Policy) MaxRequestBody() int64 { return p.h.maxRequestBody }
