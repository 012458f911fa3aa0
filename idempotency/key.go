package idempotency

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// HeaderName is the request header field that carries the key.
const HeaderName = "Idempotency-Key"

// ReplayedHeader marks a response replayed from the store: its value is
// "true". A response of the handler's own run does not carry it.
const ReplayedHeader = "Idempotent-Replayed"

// errNoKey is parseKey's error for a request without the header.
var errNoKey = errors.New("no Idempotency-Key header")

// KeyError tells why a request's Idempotency-Key header was refused.
type KeyError struct {
	// Reason is a sentence that names the fault, safe to show the client.
	Reason string
}

func (e *KeyError) Error() string { return "idempotency: malformed Idempotency-Key: " + e.Reason }

// parseKey returns the key of h's Idempotency-Key field: a Structured
// Field string (RFC 9651, section 3.3.3), with any parameters, which are
// checked and ignored. It returns errNoKey when the field is missing, and a
// *KeyError when the value is malformed, empty or longer than maxLen bytes.
func parseKey(h http.Header, maxLen int) ([]byte, error) {
	lines := h.Values(HeaderName)
	switch {
	case len(lines) == 0:
		return nil, errNoKey
	case len(lines) > 1: // combined, the lines make a list, not one item
		return nil, &KeyError{Reason: "the field appears more than once"}
	}
	s := strings.Trim(lines[0], " ")
	key, rest, err := parseString(s)
	if err != nil {
		return nil, err
	}
	if err := parseParams(rest); err != nil {
		return nil, err
	}
	switch {
	case len(key) == 0:
		return nil, &KeyError{Reason: "the key is empty"}
	case len(key) > maxLen:
		return nil, &KeyError{Reason: fmt.Sprintf("the key is %d bytes, longer than %d", len(key), maxLen)}
	}
	return key, nil
}

// parseString parses the sf-string at the start of s and returns its
// value and what follows it.
func parseString(s string) ([]byte, string, error) {
	if s == "" || s[0] != '"' {
		return nil, "", &KeyError{Reason: `the value must be a string in double quotes, such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`}
	}
	var out []byte
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return nil, "", &KeyError{Reason: `a backslash may only escape " or \`}
			}
			out = append(out, s[i])
		case c == '"':
			return out, s[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return nil, "", &KeyError{Reason: fmt.Sprintf("byte %d is 0x%02x: a string holds printable ASCII only", i, c)}
		default:
			out = append(out, c)
		}
	}
	return nil, "", &KeyError{Reason: "the string has no closing double quote"}
}

// parseParams checks that s is a list of parameters, as may follow an
// item: *( ";" *SP key [ "=" bare-item ] ).
func parseParams(s string) error {
	for s != "" {
		if s[0] != ';' {
			return &KeyError{Reason: fmt.Sprintf("unexpected %q after the string", clip(s))}
		}
		s = strings.TrimLeft(s[1:], " ")
		n := paramKeyLen(s)
		if n == 0 {
			return &KeyError{Reason: "a parameter's name must start with a lowercase letter or *"}
		}
		s = s[n:]
		if s != "" && s[0] == '=' {
			var err error
			if s, err = skipBareItem(s[1:]); err != nil {
				return err
			}
		}
	}
	return nil
}

// paramKeyLen returns the length of the parameter key at the start of s:
// ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ).
func paramKeyLen(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c == '*' || i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			continue
		}
		return i
	}
	return len(s)
}

// skipBareItem returns what follows the bare item at the start of s: a
// string, a token, a number, a boolean or a byte sequence.
func skipBareItem(s string) (string, error) {
	bad := &KeyError{Reason: "a parameter's value is malformed"}
	if s == "" {
		return "", bad
	}
	switch c := s[0]; {
	case c == '"':
		_, rest, err := parseString(s)
		return rest, err
	case c == '?':
		if len(s) < 2 || s[1] != '0' && s[1] != '1' {
			return "", bad
		}
		return s[2:], nil
	case c == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 || strings.Trim(s[1:1+end], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != "" {
			return "", bad
		}
		return s[end+2:], nil
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(s)
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '*':
		i := 1
		for i < len(s) && tokenChar(s[i]) {
			i++
		}
		return s[i:], nil
	}
	return "", bad
}

// skipNumber skips an sf-integer or sf-decimal: at most 15 digits, or 12
// before and 1 to 3 after a dot.
func skipNumber(s string) (string, error) {
	bad := &KeyError{Reason: "a parameter's number is malformed"}
	i := 0
	if s[0] == '-' {
		i++
	}
	start, dot := i, -1
digits:
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && dot < 0:
			dot = i
		default:
			break digits
		}
	}
	digits := s[start:i]
	switch {
	case digits == "" || digits[0] == '.':
		return "", bad
	case dot < 0 && len(digits) > 15:
		return "", bad
	case dot >= 0 && (dot-start > 12 || i-dot-1 < 1 || i-dot-1 > 3):
		return "", bad
	}
	return s[i:], nil
}

// tokenChar reports whether c may follow a token's first character: tchar
// (RFC 9110), ":" or "/".
func tokenChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}
