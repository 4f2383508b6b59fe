// The one KV block layout: every (layer, k|v, head, slot) row lies inside the block, rows
// never overlap and tile it exactly, in [layer][k|v][kv head][slot][dim] order, for awkward
// shapes; and a backend's bytes per token follow from it.
#include <vector>

#include "gtest/gtest.h"
#include "src/runtime/kv_layout.h"

namespace hetero {
namespace {

TEST(KvLayoutTest, RowsTileTheBlockInOrder) {
  for (const KvBlockLayout layout : {KvBlockLayout{1, 1, 1, 1}, KvBlockLayout{3, 5, 7, 16}, KvBlockLayout{30, 3, 64, 16},
                                     KvBlockLayout{2, 8, 96, 5}}) {
    std::vector<int> covered(layout.block_floats(), 0);
    size_t expected = 0;  // the nested-loop position, counted independently
    for (int layer = 0; layer < layout.n_layers; ++layer) {
      for (int values = 0; values < 2; ++values) {
        for (int head = 0; head < layout.n_kv_heads; ++head) {
          for (int slot = 0; slot < layout.block_tokens; ++slot) {
            const size_t at = layout.Offset(layer, values != 0, head, slot);
            ASSERT_EQ(at, expected);
            ASSERT_LE(at + layout.head_dim, layout.block_floats());
            for (int d = 0; d < layout.head_dim; ++d) ++covered[at + d];
            expected += layout.head_dim;
          }
        }
      }
    }
    EXPECT_EQ(expected, layout.block_floats());
    for (int c : covered) ASSERT_EQ(c, 1);
    EXPECT_EQ(layout.bytes_per_token() * layout.block_tokens, layout.block_floats() * sizeof(float));
  }
}

}  // namespace
}  // namespace hetero
