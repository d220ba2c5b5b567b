// How a gang's seats are named among the tracker's holds; internal to toposched_tracker.
#ifndef TOPOSCHED_TRACKER_GANG_SEATS_H_
#define TOPOSCHED_TRACKER_GANG_SEATS_H_

#include <string>
#include <string_view>

namespace toposched::tracker {

// The hold key of a gang's seat: the ids held for one rank until its member is bound. Pod uids
// never contain '/', so a seat cannot be mistaken for a pod.
std::string GangSeatKey(std::string_view gang, int rank);
bool IsGangSeatKey(std::string_view key);

}  // namespace toposched::tracker

#endif  // TOPOSCHED_TRACKER_GANG_SEATS_H_
