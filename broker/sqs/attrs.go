package sqs

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// emptyType is the data type of an attribute whose value is empty: SQS
// refuses an empty value, and a custom type label ("String.<label>") is
// SQS's own way to say more about one.
const emptyType = "String.inbox-empty"

// The values of BodyEncodingAttribute.
const (
	encodingBase64 = "base64"
	encodingEmpty  = "empty"
)

// sqsText reports whether SQS carries s as it is in a body or a String
// attribute: valid UTF-8 of the XML characters #x9, #xA, #xD, #x20 to
// #xD7FF, #xE000 to #xFFFD and #x10000 to #x10FFFF.
func sqsText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
		case r < 0x20, r >= 0xD800 && r < 0xE000, r == 0xFFFE || r == 0xFFFF:
			return false
		}
	}
	return true
}

// attributeValue encodes v: a String when SQS carries it as it is, Binary
// otherwise (so that any bytes survive), emptyType when it is empty.
func attributeValue(v string) types.MessageAttributeValue {
	switch {
	case v == "":
		return types.MessageAttributeValue{DataType: aws.String(emptyType), StringValue: aws.String("-")}
	case sqsText(v):
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte(v)}
}

// attributeString decodes a message attribute of any data type ("String",
// "Number", "Binary", custom labels) as a string.
func attributeString(a types.MessageAttributeValue) string {
	t := aws.ToString(a.DataType)
	switch {
	case t == emptyType:
		return ""
	case strings.HasPrefix(t, "Binary"):
		return string(a.BinaryValue)
	}
	return aws.ToString(a.StringValue)
}

// attributeSize is what an attribute counts towards SQS's message size:
// its name, data type and value.
func attributeSize(name string, a types.MessageAttributeValue) int {
	return len(name) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue)) + len(a.BinaryValue)
}

// checkAttributeName refuses a name SQS refuses: empty or over 256
// characters, a character other than A-Z, a-z, 0-9, '_', '-' and '.', a
// leading or trailing period or two in a row, or a prefix "AWS." or
// "Amazon." (any case), which SQS reserves.
func checkAttributeName(name string) error {
	switch lower := strings.ToLower(name); {
	case name == "" || len(name) > 256:
		return fmt.Errorf("attribute name %q: SQS takes 1 to 256 characters", name)
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return fmt.Errorf("attribute name %q: SQS reserves the prefixes AWS. and Amazon.", name)
	case name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, ".."):
		return fmt.Errorf("attribute name %q: SQS refuses a leading or trailing period, or two in a row", name)
	}
	for i := range len(name) {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("attribute name %q: SQS takes only A-Z, a-z, 0-9, '_', '-' and '.'", name)
		}
	}
	return nil
}

// checkGroup refuses a FIFO message group ID that SQS refuses: 1 to 128
// characters, alphanumeric or punctuation (ASCII 33 to 126). The same
// rule holds for a deduplication ID.
func checkGroup(g string) error {
	if g == "" || len(g) > 128 {
		return fmt.Errorf("%q: SQS takes 1 to 128 characters", g)
	}
	for i := range len(g) {
		if c := g[i]; c < 33 || c > 126 {
			return fmt.Errorf("%q: SQS takes only ASCII letters, digits and punctuation", g)
		}
	}
	return nil
}

// encodeBody returns the body for payload, and the value of
// BodyEncodingAttribute when the payload is not sent as it is.
func encodeBody(payload []byte) (body, encoding string) {
	switch s := string(payload); {
	case s == "":
		return "-", encodingEmpty
	case sqsText(s):
		return s, ""
	}
	return base64.StdEncoding.EncodeToString(payload), encodingBase64
}

// decodeBody reverses encodeBody.
func decodeBody(body, encoding string) ([]byte, error) {
	switch encoding {
	case "":
		return []byte(body), nil
	case encodingEmpty:
		return nil, nil
	case encodingBase64:
		return base64.StdEncoding.DecodeString(body)
	}
	return nil, fmt.Errorf("unknown %s %q", BodyEncodingAttribute, encoding)
}

// queueName returns the name of the queue that q names or locates.
func queueName(q string) string {
	if u, err := url.Parse(q); err == nil && u.Scheme != "" {
		return u.Path[strings.LastIndexByte(u.Path, '/')+1:]
	}
	return q
}

// isURL reports whether q is a queue URL rather than a name.
func isURL(q string) bool {
	return strings.HasPrefix(q, "https://") || strings.HasPrefix(q, "http://")
}

// fifo reports whether the queue is a FIFO queue: SQS requires their
// names to end in ".fifo".
func fifo(q string) bool { return strings.HasSuffix(queueName(q), ".fifo") }

// Error codes, as smithy.APIError.ErrorCode() reports them: SQS's JSON
// protocol names ("QueueDoesNotExist"), and the query protocol's, which
// SQS also sends for compatibility (x-amzn-query-error) and which the SDK
// then reports instead.
var (
	queueNotFoundCodes = map[string]bool{
		"QueueDoesNotExist": true, "AWS.SimpleQueueService.NonExistentQueue": true,
	}
	accessDeniedCodes = map[string]bool{
		"AccessDenied": true, "AccessDeniedException": true, "InvalidClientTokenId": true,
		"UnrecognizedClientException": true, "SignatureDoesNotMatch": true, "IncompleteSignature": true,
		"MissingAuthenticationToken": true, "InvalidAccessKeyId": true, "InvalidSecurity": true,
		"KMS.AccessDeniedException": true, "KmsAccessDenied": true,
	}
)

// classify wraps err with ErrQueueNotFound or ErrAccessDenied when SQS's
// answer says so; other errors are returned as they are.
func classify(err error) error {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return err
	}
	var missing *types.QueueDoesNotExist
	switch code := api.ErrorCode(); {
	case errors.As(err, &missing) || queueNotFoundCodes[code]:
		return fmt.Errorf("%w: %w", ErrQueueNotFound, err)
	case accessDeniedCodes[code]:
		return fmt.Errorf("%w: %w", ErrAccessDenied, err)
	}
	return err
}

// terminal reports whether a classified error ends a Source.
func terminal(err error) bool {
	return errors.Is(err, ErrQueueNotFound) || errors.Is(err, ErrAccessDenied)
}
