#pragma once

#include <string_view>

#include "bench/request_record.h"
#include "bench/target_endpoint.h"
#include "common/clock.h"

namespace brisk::bench {

// How brisk bench reads what a server sent back for a completion, whichever server it is: token
// counts from `usage`, whether text arrived, or an `error` object in place of a result. Servers
// differ and some misbehave, so an answer of any shape only fails the record, with a message.

// One `data:` event of a 200 event stream, other than the final [DONE]. An event that carries
// text is a content chunk that arrived at `arrived`.
void read_stream_event(std::string_view data, ApiKind kind, TimePoint arrived,
                       RequestRecord& record);

// The whole body of a 200 non-streamed response.
void read_response_body(std::string_view body, ApiKind kind, RequestRecord& record);

}  // namespace brisk::bench
