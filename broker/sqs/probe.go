package sqs

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/inboxkit/inbox/broker"
)

var _ broker.Prober = (*Publisher)(nil)

// Probe lists at most one queue. That request fails when SQS does not answer
// or refuses the credentials.
//
// A publisher allowed to send but not to list queues is answered
// AccessDenied, which is an answer. Probe then succeeds. It also succeeds
// when a message's queue does not exist, since that is the message's
// problem, not the service's.
func (p *Publisher) Probe(ctx context.Context) error {
	_, err := p.cl.ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)})
	var api smithy.APIError
	if err == nil || errors.As(err, &api) && (api.ErrorCode() == "AccessDenied" || api.ErrorCode() == "AccessDeniedException") {
		return nil
	}
	return fmt.Errorf("sqs: probe: %w", err)
}
