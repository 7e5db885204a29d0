package dynamostore

// The expressions every request uses. Attribute names are always
// placeholders (#...), since a name may be a reserved word (as "status"
// is); values are placeholders (:...).

// claimCondition takes the key when there is no item, when it has
// expired, or when it is an in-progress claim whose lease has ended.
const claimCondition = "attribute_not_exists(#pk) OR #ex <= :now OR (#st = :ip AND #le <= :now)"

// heldCondition is true while the claim is in progress and holds :tok.
const heldCondition = "#tok = :tok AND #st = :ip"

// names maps the expression placeholders a Store uses to its attribute
// names; each request sends only those it uses.
func (s *Store) names(placeholders ...string) map[string]string {
	a := &s.attrs
	m := make(map[string]string, len(placeholders))
	for _, p := range placeholders {
		var n string
		switch p {
		case "#pk":
			n = s.pk
		case "#fp":
			n = a.Fingerprint
		case "#tok":
			n = a.Token
		case "#st":
			n = a.State
		case "#ca":
			n = a.CreatedAt
		case "#cs":
			n = a.CreatedSec
		case "#le":
			n = a.LeaseEnd
		case "#ex":
			n = a.ExpiresAt
		case "#ttl":
			n = a.TTL
		case "#sc":
			n = a.Status
		case "#h":
			n = a.Header
		case "#b":
			n = a.Body
		case "#bc":
			n = a.BodyCoding
		case "#hc":
			n = a.HeaderCoding
		case "#bo":
			n = a.BodyOmitted
		case "#bk":
			n = a.BodyChunks
		default:
			panic("dynamostore: unknown placeholder " + p)
		}
		m[p] = n
	}
	return m
}
