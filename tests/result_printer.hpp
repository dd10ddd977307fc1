// Lets doctest print a tz::result in failed assertions: "ok", or the error kind and message.
#pragma once

#include "tz/base/error.hpp"

#include <doctest/doctest.h>

namespace doctest {

template <class T>
struct StringMaker<boost::system::result<T, tz::error>> {
  static String convert(const boost::system::result<T, tz::error>& r) {
    if (r) return "ok";
    const auto e = r.error();
    return String((std::string("error(") + tz::errc_name(e.code) + "): " + e.message).c_str());
  }
};

}  // namespace doctest
