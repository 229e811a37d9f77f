#!/bin/sh
# A demo delivery target: appends each event to received.log next to this script.
#
# hookinbox runs it without a shell's help: the raw body on stdin, the metadata in
# HOOKINBOX_* variables, nothing else of hookinbox's environment. Exit 0 means "delivered";
# any other exit means "try again later", with the same HOOKINBOX_IDEMPOTENCY_KEY.
set -eu
log="$(dirname "$0")/received.log"
key="$HOOKINBOX_IDEMPOTENCY_KEY"

# A redelivery (after a crash, a timeout or a replay) carries the same key: the event was
# handled already, so say "delivered" again and do nothing twice.
if [ -f "$log" ] && grep -q "key=$key" "$log"; then
    exit 0
fi
{
    printf '%s source=%s event=%s attempt=%s key=%s\n' \
        "$HOOKINBOX_RECEIVED_AT" "$HOOKINBOX_SOURCE" "$HOOKINBOX_EVENT_ID" \
        "$HOOKINBOX_ATTEMPT" "$key"
    cat
    printf '\n'
} >>"$log"
