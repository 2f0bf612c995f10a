// C++: a heap object held by two frames (main and a member function), owning a vector.
#include <vector>

namespace shop {
class Basket {
  public:
    std::vector<long> items;
    __attribute__((noinline)) long hold();
};

long Basket::hold() {
    items.resize(1500);
    items[0] = 4;
    snapshot_and_wait(1);
    return (long)items.size() + items[0];
}
} // namespace shop

int main() {
    shop::Basket *volatile basket = new shop::Basket;
    long n = basket->hold();
    delete basket;
    printf("items %ld\n", n);
    return 0;
}
