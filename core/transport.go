package idem

// This file is what an adapter on an HTTP stack other than net/http
// (Fiber, fasthttp) needs beside Start and Finish to behave as the
// net/http middleware does: the request's fingerprint, and the options it
// cannot apply.

// FingerprintRequest returns the fingerprint the net/http middleware gives
// a request with method, target (its path and query as sent) and body:
// Fingerprint(method, target, body), or with WithJSONFingerprint that of
// the body's canonical JSON, with an error wrapping ErrInvalidJSON when
// the body is not JSON.
func (e *Engine) FingerprintRequest(method, target string, body []byte) (string, error) {
	jc := e.cfg.jsonFP
	if jc == nil || len(body) == 0 {
		return Fingerprint(method, target, body), nil
	}
	v, p, err := parseJSON(body)
	if err != nil {
		return "", err
	}
	defer p.release()
	return Fingerprint(method, target, jc.canonical(nil, &v)), nil
}

// RequestOptions returns the names of the options e was built with that
// work on a *http.Request or on the net/http middleware's body handling:
// WithNamespace, WithFingerprint and WithKeyField. An adapter on another
// HTTP stack cannot apply them, so it refuses an engine that has them
// (rather than ignore them) and takes its own equivalents.
func (e *Engine) RequestOptions() []string {
	var names []string
	if e.cfg.namespace != nil {
		names = append(names, "WithNamespace")
	}
	if e.cfg.fingerprint != nil {
		names = append(names, "WithFingerprint")
	}
	if e.cfg.keyField != "" {
		names = append(names, "WithKeyField")
	}
	return names
}

// MaxRequestBody returns the largest request body the engine reads
// (WithMaxRequestBody); a larger one gets 413.
func (e *Engine) MaxRequestBody() int64 { return e.cfg.maxRequestBody }
