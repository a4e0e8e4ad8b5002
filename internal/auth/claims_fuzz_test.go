package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"symbi/internal/strictjson"
)

// FuzzCheckClaims: the claims of a JWT are read only once its signature verifies, so
// FuzzJWTVerify's mutations never reach them (the fuzzer cannot sign). Here any claims
// text is checked as the verified payload of a token. checkClaims never panics, refuses
// with an invalid-token error, and accepts exactly what the package comment and
// docs/http.md document — read independently below: one JSON object, no claim named
// twice, no lone surrogate escape; iss (exact name) equal to the issuer; aud a string or an
// array of strings containing the audience; exp a number not passed (30 s leeway); nbf and
// iat, when given as numbers, not in the future (30 s leeway); sub a string that is a
// caller id, not a reserved one; scope, when given, a string — and the TokenInfo says the
// caller, scopes and exp so read.
func FuzzCheckClaims(f *testing.F) {
	const iss, aud = "https://idp.example/", "https://symbi.example/mcp"
	now := time.Unix(1_800_000_000, 0)
	j := &JWT{cfg: JWTConfig{Issuer: iss, Audience: aud, Claim: DefaultClaim}}
	claims := func(extra string) string {
		return `{"iss":"` + iss + `","aud":"` + aud + `","exp":1800000100,"sub":"alice"` + extra + `}`
	}
	for _, s := range []string{
		claims(""),
		claims(`,"scope":"read write"`),
		claims(`,"scope":null`),
		claims(`,"scope":["read"]`),
		claims(`,"nbf":1800000030,"iat":1800000030`),
		claims(`,"nbf":1800000031`),
		claims(`,"iat":1800000031`),
		claims(`,"nbf":null,"iat":null`),
		claims(`,"nbf":"1800000031"`),
		claims(`,"nbf":1e300`),
		claims(`,"nbf":4611686018427387903`),
		claims(`,"sub":"bob"`),
		claims(`,"Aud":"x","EXP":1`),
		claims(`,"x":"\ud800"`),
		`{"iss":"` + iss + `","aud":["a","` + aud + `"],"exp":1799999970,"sub":"alice"}`,
		`{"iss":"` + iss + `","aud":["a","` + aud + `"],"exp":1799999969,"sub":"alice"}`,
		`{"iss":"` + iss + `","aud":["a",1],"exp":1800000100,"sub":"alice"}`,
		`{"iss":"` + iss + `","aud":"` + aud + `","exp":1.8000001e9,"sub":"alice"}`,
		`{"iss":"` + iss + `","aud":"` + aud + `","exp":null,"sub":"alice"}`,
		`{"iss":"` + iss + `","aud":"` + aud + `","exp":1e19,"sub":"alice"}`,
		`{"iss":"` + iss + `","aud":"` + aud + `","exp":1800000100,"sub":"stdio"}`,
		`{"iss":"` + iss + `","aud":"` + aud + `","exp":1800000100,"sub":null}`,
		`{"iss":"` + iss + `","aud":"` + aud + `","exp":1800000100,"sub":"-x"}`,
		`{"iss":null,"aud":"` + aud + `","exp":1800000100,"sub":"alice"}`,
		`{"ISS":"` + iss + `","aud":"` + aud + `","exp":1800000100,"sub":"alice"}`,
		`[]`, `null`, `{}`, ``, `{"sub":"a"} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		ti, err := j.checkClaims(payload, now)
		want, why := refClaims(payload, now, iss, aud)
		if err != nil {
			if !errors.Is(err, sdkauth.ErrInvalidToken) {
				t.Fatalf("%q: refusal %v is not an invalid token", payload, err)
			}
			if ti != nil {
				t.Fatalf("%q: refused (%v) with a TokenInfo", payload, err)
			}
			if want != nil {
				t.Fatalf("%q: refused (%v), but the documented checks all pass", payload, err)
			}
			return
		}
		if want == nil {
			t.Fatalf("%q: accepted as %q, but the documented checks refuse it: %s", payload, ti.UserID, why)
		}
		if ti.UserID != want.UserID || !slices.Equal(ti.Scopes, want.Scopes) || !ti.Expiration.Equal(want.Expiration) {
			t.Fatalf("%q: accepted as %+v, the claims say %+v", payload, ti, want)
		}
		if c, ok := FromTokenInfo(ti); !ok || c.ID != want.UserID {
			t.Fatalf("%q: TokenInfo %+v names no JWT caller", payload, ti)
		}
	})
}

// refClaims is the documented reading of verified claims at now: the TokenInfo they
// give, or nil and why not.
func refClaims(payload []byte, now time.Time, iss, aud string) (*sdkauth.TokenInfo, string) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(payload, &all); err != nil || all == nil {
		return nil, "not a JSON object"
	}
	if err := strictjson.Check(payload, strictjson.Options{Single: true, NoLoneSurrogates: true}); err != nil {
		return nil, err.Error()
	}
	// isString says whether the claim name is present as a JSON string; value reads it.
	isString := func(name string) bool {
		raw, ok := all[name]
		var v string
		return ok && raw[0] == '"' && json.Unmarshal(raw, &v) == nil
	}
	value := func(name string) string {
		var v string
		json.Unmarshal(all[name], &v)
		return v
	}
	date := func(name string) (time.Time, bool, error) { // value, present (not null), error
		raw, ok := all[name]
		if !ok || string(raw) == "null" {
			return time.Time{}, false, nil
		}
		if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			return time.Time{}, true, fmt.Errorf("%s is not a number", name)
		}
		v, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || math.Abs(v) >= 1<<62 {
			return time.Time{}, true, fmt.Errorf("%s %s is not a NumericDate", name, raw)
		}
		return time.Unix(int64(v), 0), true, nil
	}
	if !isString("iss") || value("iss") != iss {
		return nil, "iss"
	}
	var audience []string
	if raw, ok := all["aud"]; !ok {
		return nil, "no aud"
	} else if raw[0] == '"' {
		audience = []string{value("aud")}
	} else {
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil, "aud is not a string or an array"
		}
		for _, it := range items {
			var s string
			if it[0] != '"' || json.Unmarshal(it, &s) != nil {
				return nil, "aud holds a non-string"
			}
			audience = append(audience, s)
		}
	}
	if !slices.Contains(audience, aud) {
		return nil, "aud does not contain the audience"
	}
	exp, present, err := date("exp")
	switch {
	case err != nil:
		return nil, err.Error()
	case !present:
		return nil, "no exp"
	case now.Add(-Leeway).After(exp):
		return nil, "expired"
	}
	for _, name := range []string{"nbf", "iat"} {
		t, present, err := date(name)
		if err != nil {
			return nil, err.Error()
		}
		if present && now.Add(Leeway).Before(t) {
			return nil, name + " in the future"
		}
	}
	if !isString("sub") {
		return nil, "sub is not a string"
	}
	id := value("sub")
	if !ValidCallerID(id) || Reserved(id) {
		return nil, "sub is not a caller id"
	}
	var scopes []string
	if raw, ok := all["scope"]; ok && string(raw) != "null" {
		if raw[0] != '"' {
			return nil, "scope is not a string"
		}
		scopes = strings.Fields(value("scope"))
	}
	return &sdkauth.TokenInfo{UserID: id, Scopes: scopes, Expiration: exp}, ""
}
