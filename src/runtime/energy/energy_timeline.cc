#include "src/runtime/energy/energy_timeline.h"

#include <algorithm>
#include <set>

namespace hetero::internal {

void EnergyTimeline::Add(EnergyClock::time_point time, double joules) {
  // Out of order (two threads sample): ignored. Against the last sample's own time, not the
  // last knot's, which may sit earlier (an update placed midway).
  if (!knots_.empty() && time <= last_time_) return;
  last_time_ = time;
  if (!knots_.empty() && joules <= knots_.back().joules) {
    // The counter did not move (or went back): keep only the latest repeat as the tail,
    // so that interpolation runs between real movements.
    if (last_was_repeat_) knots_.pop_back();
    knots_.push_back({time, knots_.back().joules});
    last_was_repeat_ = true;
    return;
  }
  if (last_was_repeat_) {
    // The counter updated between the repeat and now: the midpoint is the unbiased guess of
    // when (taking `time` would lag a coarse counter by half a sampling interval, which
    // shifts energy from the end of a busy stage to the idle time after it). The repeat
    // itself then goes: the energy accrued across it.
    const EnergyClock::time_point repeat_time = knots_.back().time;
    knots_.pop_back();
    last_was_repeat_ = false;
    time = repeat_time + (time - repeat_time) / 2;
  }
  knots_.push_back({time, joules});
}

void EnergyTimeline::TrimBefore(EnergyClock::time_point time) {
  // Extending past the last movement needs it and the one before (and a repeat at the tail
  // stays too): those survive any trim.
  const size_t keep_at_least = last_was_repeat_ ? 3 : 2;
  size_t keep_from = 0;
  while (keep_from + keep_at_least < knots_.size() && knots_[keep_from + 1].time <= time) ++keep_from;
  for (; keep_from > 0; --keep_from) knots_.pop_front();
}

double EnergyTimeline::JoulesAt(EnergyClock::time_point time) const {
  if (knots_.empty()) return 0;
  if (time <= knots_.front().time) return knots_.front().joules;
  // Past the counter's last movement it has not updated yet, though energy went on
  // accruing: a task ending there would lose up to one update period of its energy (on an
  // H200, 4-6% of each agentic task, 2026-12-04). Extended at the last period's power, for
  // at most one more period (a counter that truly stopped is not extrapolated for ever).
  const size_t last_move = knots_.size() - (last_was_repeat_ && knots_.size() >= 2 ? 2 : 1);
  if (time >= knots_[last_move].time) {
    const Knot& m = knots_[last_move];
    if (last_move == 0) return m.joules;
    const Knot& p = knots_[last_move - 1];
    const auto period = m.time - p.time;
    const double seconds = std::chrono::duration<double>(period).count();
    if (seconds <= 0) return m.joules;
    const double ahead = std::chrono::duration<double>(std::min(time - m.time, period)).count();
    return m.joules + (m.joules - p.joules) * ahead / seconds;
  }
  auto hi = std::upper_bound(knots_.begin(), knots_.end(), time,
                             [](EnergyClock::time_point t, const Knot& k) { return t < k.time; });
  auto lo = hi - 1;
  const double span = std::chrono::duration<double>(hi->time - lo->time).count();
  const double part = std::chrono::duration<double>(time - lo->time).count();
  return lo->joules + (hi->joules - lo->joules) * (span > 0 ? part / span : 1.0);
}

EnergyTimeline::Window EnergyTimeline::Between(EnergyClock::time_point start, EnergyClock::time_point end) const {
  Window w;
  if (knots_.empty() || end <= start) return w;
  w.joules = std::max(0.0, JoulesAt(end) - JoulesAt(start));
  w.covered = knots_.front().time <= start && last_time_ >= end;
  const auto gap_at = [&](EnergyClock::time_point t) {
    auto hi = std::upper_bound(knots_.begin(), knots_.end(), t,
                               [](EnergyClock::time_point x, const Knot& k) { return x < k.time; });
    if (hi == knots_.begin() || hi == knots_.end()) return EnergyClock::duration::max();
    return hi->time - (hi - 1)->time;
  };
  const auto length = end - start;
  w.interpolated = !w.covered || gap_at(start) > length || gap_at(end) > length;
  return w;
}

std::vector<StageEnergy> AttributeEnergy(const std::vector<StageWindow>& windows,
                                         const std::map<Device, EnergyTimeline>& devices) {
  std::vector<StageEnergy> out(windows.size());
  std::set<EnergyClock::time_point> cuts;
  for (size_t i = 0; i < windows.size(); ++i) {
    out[i].task_id = windows[i].task_id;
    out[i].stage_index = windows[i].stage_index;
    if (windows[i].end > windows[i].start) {
      cuts.insert(windows[i].start);
      cuts.insert(windows[i].end);
    }
  }
  if (cuts.size() < 2) return out;
  for (auto a = cuts.begin(), b = std::next(a); b != cuts.end(); ++a, ++b) {
    std::vector<size_t> active;
    for (size_t i = 0; i < windows.size(); ++i) {
      if (windows[i].start <= *a && windows[i].end >= *b && windows[i].end > windows[i].start) active.push_back(i);
    }
    if (active.empty()) continue;
    for (const auto& [device, timeline] : devices) {
      const EnergyTimeline::Window e = timeline.Between(*a, *b);
      std::vector<size_t> on_device;
      for (size_t i : active) {
        if (windows[i].device == device) on_device.push_back(i);
      }
      if (!on_device.empty()) {
        for (size_t i : on_device) {
          out[i].device_joules += e.joules / static_cast<double>(on_device.size());
          out[i].interpolated |= e.interpolated;
        }
      } else {
        for (size_t i : active) {
          out[i].idle_joules += e.joules / static_cast<double>(active.size());
          out[i].interpolated |= e.interpolated;
        }
      }
    }
  }
  return out;
}

}  // namespace hetero::internal
