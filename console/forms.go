package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// formLife is how long a form's token stays valid: a page left open
// longer asks to be reloaded.
const formLife = 12 * time.Hour

// maxForm bounds a form's body. Ours carry a filter and a token.
const maxForm = 64 << 10

// formKeyLen is the length of a random FormKey, and the least accepted.
const formKeyLen = 32

func newFormKey() []byte {
	k := make([]byte, formKeyLen)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// formToken signs an expiry time: a form carries it, and a POST without
// a valid one is refused. A page of another site cannot read it.
func (c *Console) formToken(now time.Time) string {
	exp := strconv.FormatInt(now.Add(formLife).Unix(), 10)
	return exp + "." + c.sign(exp)
}

func (c *Console) sign(exp string) string {
	m := hmac.New(sha256.New, c.formKey)
	m.Write([]byte("inbox console form\x00" + exp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkForm reports whether r's form carries a token this console signed
// and that has not expired. It reads the form, bounded by maxForm.
func (c *Console) checkForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		return false
	}
	exp, mac, ok := strings.Cut(r.PostForm.Get("csrf"), ".")
	if !ok {
		return false
	}
	t, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || c.now().Unix() > t {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(c.sign(exp)))
}
